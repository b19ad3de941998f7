//! Pure formatting for the job commands: no I/O, no clocks (callers pass `now`), so every
//! line can be unit-tested against exact text (cli.md §4).

pub mod jobs;
pub mod score_id;
pub mod status_json;
pub mod status_view;
pub mod style;
pub mod table;
pub mod tasks;
pub mod time;

pub use score_id::validate_score_id;
pub use style::{Color, Style};
