//! One module per command.

pub mod cancel;
pub mod clear;
pub mod conductor_status;
pub mod dashboard;
pub mod diagnose;
pub mod errors;
pub mod history;
pub mod instruments;
pub mod list;
pub mod logs;
pub mod mcp;
pub mod modify;
pub mod pause;
pub mod restart;
pub mod resume;
pub mod run;
pub mod start;
pub mod status;
pub mod stop;
pub mod submit;
pub mod top;
pub mod validate;
