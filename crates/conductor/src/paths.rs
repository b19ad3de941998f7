//! Where the conductor keeps its files: defined once in the protocol crate, which the CLI
//! and other clients share (architecture.md "Paths").

pub use mozart_ipc::paths::{mozart_home, ConductorPaths, NoHome, HOME_ENV};

impl From<NoHome> for crate::ConductorError {
    fn from(_: NoHome) -> Self {
        crate::ConductorError::NoHome
    }
}
