//! The E-code table (execution.md §7.1).

use serde::{Deserialize, Serialize};

/// Broad kind of an error (execution.md §7.1): defined once, in `mozart-ipc`'s checkpoint
/// types, because the checkpoint stores it and the protocol crate sits below this one.
pub use mozart_ipc::checkpoint::ErrorCategory;

/// How bad an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Severity {
    /// Stop-the-world.
    Critical,
    /// Normal failure.
    Error,
    /// Expected, recoverable.
    Warning,
}

macro_rules! error_codes {
    ($($variant:ident = $code:literal, $name:literal, $retriable:literal, $delay:literal, $sev:ident, $root:literal;)*) => {
        /// Every error code of execution.md §7.1 (40 codes), and ours: E7xx, the reviewer
        /// loop (docs/mochi.md).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum ErrorCode {
            $(
                #[doc = $name]
                #[serde(rename = $code)]
                $variant,
            )*
        }

        impl ErrorCode {
            /// All codes in table order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The code string, e.g. `E101`.
            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code),* }
            }

            /// Upstream's constant name, e.g. `RATE_LIMIT_API`.
            pub fn name(self) -> &'static str {
                match self { $(ErrorCode::$variant => $name),* }
            }

            /// The code's default retriable flag.
            pub fn is_retriable(self) -> bool {
                match self { $(ErrorCode::$variant => $retriable),* }
            }

            /// The code's default retry delay in seconds.
            pub fn delay_seconds(self) -> f64 {
                match self { $(ErrorCode::$variant => $delay as f64),* }
            }

            /// Severity.
            pub fn severity(self) -> Severity {
                match self { $(ErrorCode::$variant => Severity::$sev),* }
            }

            /// Root-cause priority: lower is more fundamental (execution.md §7.5 step 6).
            pub fn root_priority(self) -> i32 {
                match self { $(ErrorCode::$variant => $root),* }
            }
        }
    };
}

error_codes! {
    E001 = "E001", "EXECUTION_TIMEOUT", true, 60, Error, 60;
    E002 = "E002", "EXECUTION_KILLED", true, 30, Error, 63;
    E003 = "E003", "EXECUTION_CRASHED", false, 0, Critical, 62;
    E004 = "E004", "EXECUTION_INTERRUPTED", false, 0, Error, 64;
    E005 = "E005", "EXECUTION_OOM", false, 0, Critical, 61;
    E006 = "E006", "EXECUTION_STALE", true, 120, Warning, 99;
    E009 = "E009", "EXECUTION_UNKNOWN", true, 10, Error, 90;
    E101 = "E101", "RATE_LIMIT_API", true, 3600, Error, 50;
    E102 = "E102", "RATE_LIMIT_CLI", true, 900, Error, 51;
    E103 = "E103", "CAPACITY_EXCEEDED", true, 300, Warning, 52;
    E104 = "E104", "QUOTA_EXHAUSTED", true, 0, Error, 53;
    E201 = "E201", "VALIDATION_FILE_MISSING", true, 5, Error, 80;
    E202 = "E202", "VALIDATION_CONTENT_MISMATCH", true, 5, Error, 81;
    E203 = "E203", "VALIDATION_COMMAND_FAILED", true, 10, Error, 82;
    E204 = "E204", "VALIDATION_TIMEOUT", true, 30, Warning, 83;
    E209 = "E209", "VALIDATION_GENERIC", true, 5, Error, 84;
    E301 = "E301", "CONFIG_INVALID", false, 0, Error, 20;
    E302 = "E302", "CONFIG_MISSING_FIELD", false, 0, Error, 21;
    E303 = "E303", "CONFIG_PATH_NOT_FOUND", false, 0, Error, 13;
    E304 = "E304", "CONFIG_PARSE_ERROR", false, 0, Error, 22;
    E305 = "E305", "CONFIG_MCP_ERROR", false, 0, Error, 23;
    E306 = "E306", "CONFIG_CLI_MODE_ERROR", false, 0, Error, 24;
    E401 = "E401", "STATE_CORRUPTION", false, 0, Critical, 70;
    E402 = "E402", "STATE_LOAD_FAILED", true, 5, Error, 72;
    E403 = "E403", "STATE_SAVE_FAILED", true, 5, Error, 73;
    E404 = "E404", "STATE_VERSION_MISMATCH", false, 0, Error, 71;
    E501 = "E501", "BACKEND_CONNECTION", true, 30, Error, 43;
    E502 = "E502", "BACKEND_AUTH", false, 0, Critical, 30;
    E503 = "E503", "BACKEND_RESPONSE", true, 15, Error, 91;
    E504 = "E504", "BACKEND_TIMEOUT", true, 60, Error, 54;
    E505 = "E505", "BACKEND_NOT_FOUND", false, 0, Critical, 10;
    E601 = "E601", "PREFLIGHT_PATH_MISSING", false, 0, Error, 11;
    E602 = "E602", "PREFLIGHT_PROMPT_TOO_LARGE", false, 0, Error, 85;
    E603 = "E603", "PREFLIGHT_WORKING_DIR_INVALID", false, 0, Error, 12;
    E604 = "E604", "PREFLIGHT_VALIDATION_SETUP", false, 0, Error, 86;
    E701 = "E701", "REVIEW_LOOP_EXHAUSTED", false, 0, Error, 87;
    E702 = "E702", "REVIEW_DISPATCH_FAILED", false, 0, Error, 88;
    E901 = "E901", "NETWORK_CONNECTION_FAILED", true, 30, Error, 40;
    E902 = "E902", "NETWORK_DNS_ERROR", true, 30, Error, 41;
    E903 = "E903", "NETWORK_SSL_ERROR", true, 30, Error, 42;
    E904 = "E904", "NETWORK_TIMEOUT", true, 60, Error, 55;
    E999 = "E999", "UNKNOWN", true, 30, Error, 99;
}

impl ErrorCode {
    /// Parse `E101` etc.
    pub fn parse(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.as_str() == code)
    }

    /// Whether this code is a rate limit / capacity / quota code (category digit 1).
    pub fn is_rate_limit(self) -> bool {
        self.as_str().as_bytes().get(1) == Some(&b'1')
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
