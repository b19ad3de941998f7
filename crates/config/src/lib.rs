//! Mozart score configuration: loading, validation, the sheet plan and templating.
//!
//! Public API (what the rest of the workspace codes against):
//! - [`load_score`]`(path) -> Result<Score, ConfigError>`: YAML 1.1 load + schema + fan-out
//!   expansion; [`Score`] holds the validated [`JobConfig`], the path and the raw text.
//! - [`SheetPlan::build`]`(&JobConfig) -> Result<SheetPlan, ConfigError>` with
//!   [`PlannedSheet`] per concrete sheet (1-based numbers, movement/voice, items,
//!   dependencies, resolved instrument, config, fallbacks, skip rules, timeout).
//! - [`template::render_prompt`]`(&JobConfig, &PlannedSheet, &RenderContext)` — the rendered
//!   template layer; [`template::build_sheet_prompt`] adds injections and requirements.
//! - [`placeholders::expand`]`(text, &PlaceholderVars, shell_quote) -> String`.
//! - [`expr::evaluate`]`(expr, &ExprContext) -> Result<bool, ExprError>` for `skip_when`;
//!   [`expr::condition_applies`] for validation `condition`s.
//! - [`validate::run_checks`] — the extended V-checks of `mozart validate`.
//! - [`ValidationRule`] and every other score model in [`model`].

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod braces;
pub mod check;
pub mod error;
pub mod expr;
pub mod model;
mod paths;
pub mod placeholders;
pub mod plan;
pub mod profile_trust;
pub mod pyregex;
pub mod tasks;
pub mod template;
pub mod validate;
pub mod words;
pub mod yaml;

mod load;

/// The score's reading of YAML: `mozart-yaml`'s deserializer with pydantic's lax coercions
/// and error entries ([`FieldError`]).
pub use mozart_yaml::de::lax as de;

pub use de::FieldError;
pub use error::ConfigError;
pub use load::{
    load_score, load_score_str, load_score_text_only, names_workspace, FileAccess, Score,
};
pub use model::{JobConfig, SkipWhenCommand, ValidationRule, ValidationType};
pub use paths::{chained_score, resolve_own_path, resolve_path};
pub use plan::{PlanOutline, PlannedSheet, SheetPlan};
pub use template::RenderContext;
pub use words::{noun, plural};
