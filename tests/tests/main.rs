//! Every black-box test of the real `mozart` binary, one module per concern, in one test
//! binary (one link instead of one per file). Shared helpers: `mozart_tests` (tests/src),
//! `harness` (end-to-end fixtures) and `support` (torture helpers).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../fixtures/e2e/harness.rs"]
mod harness;
#[path = "../torture/support.rs"]
mod support;

mod attempt_ends;
mod cli_diag_e2e;
mod cli_diag_no_conductor;
mod cli_global_options;
mod cli_jobs_e2e;
mod cli_jobs_no_conductor;
mod cli_operator_commands;
mod cli_scripting;
mod conductor_lifecycle;
mod config_validate;
mod contrib_systemd;
mod daemon_stream_monitor;
mod daemon_stream_top_cli;
mod e2e_concerts;
mod e2e_crash;
mod e2e_execution;
mod e2e_flow;
mod e2e_json_state;
mod e2e_skip;
mod examples;
mod instrument_holds;
mod issue_solver;
mod learning_figures;
mod list_pages;
mod logs_events;
mod mcp_inline;
mod mochi_details;
mod mochi_e2e;
mod mochi_tasks;
mod notifications_e2e;
mod orphans;
mod real_cli_bad_input;
mod real_cli_broken;
mod real_cli_claude;
mod real_cli_codex;
mod real_cli_formats;
mod real_cli_gemini;
mod real_cli_mochi;
mod real_cli_slurm;
mod scale_engine;
mod security_dashboard;
mod security_injection;
mod security_modes;
mod security_processes;
mod security_redaction;
mod security_secrets;
mod security_socket;
mod slurm_accounting;
mod slurm_arrays;
mod slurm_attempt_files;
mod slurm_exactly_once;
mod slurm_placement;
mod status_live_large;
mod status_scale;
mod status_truth;
mod status_words;
mod torture_clients;
mod torture_disk_full;
mod torture_fuzz_regressions;
mod torture_kill9;
mod torture_socket_garbage;
mod upstream_cli_modify_resume;
mod upstream_cli_shapes;
mod web_dashboard;
mod web_dashboard_http;
mod web_mcp;
mod wire_round_trip;
mod wiring_e2e;
