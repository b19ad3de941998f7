//! `mozart-bench` rows of the operator commands (issue 15): each new command that does not
//! talk to an AI, against an idle conductor with 1,000 jobs in its registry (bar: < 20 ms).

use super::*;

/// One row per command; `env` has a running conductor over the seeded registry.
pub(crate) fn operator_rows(env: &Env, reps: usize, report: &mut Report) -> Result<()> {
    let init_dir = env.work.join("bench-init");
    let init_arg = init_dir.display().to_string();
    let commands: Vec<(&str, Vec<&str>)> = vec![
        (
            "init",
            vec!["init", "benchscore", "--path", &init_arg, "--force"],
        ),
        ("doctor", vec!["doctor"]),
        ("config_show", vec!["config", "show"]),
        ("config_path", vec!["config", "path"]),
        ("clear_rate_limits", vec!["clear-rate-limits"]),
        ("wait_done", vec!["wait", "seeded-job-0002"]),
        ("completion_bash", vec!["completion", "bash"]),
        ("man", vec!["man"]),
        ("complete_jobs", vec!["__complete-jobs"]),
        ("patterns_list", vec!["patterns-list"]),
        ("learning_stats", vec!["learning-stats", "--json"]),
        ("patterns_entropy", vec!["patterns-entropy"]),
        ("learning_activity", vec!["learning-activity"]),
        ("entropy_status", vec!["entropy-status"]),
    ];
    for (key, args) in commands {
        let took = median_of(reps, || env.time_ok(&args))?;
        report.add(
            Row::ms(
                &format!("{key}_1000"),
                &format!("`mozart {}`, 1,000 jobs in registry", args.join(" ")),
                took,
                reps,
            )
            .bar_below(20.0),
        );
    }
    Ok(())
}

/// `--only-cmds`: a conductor over 1,000 seeded jobs and the operator rows alone.
pub(crate) fn only_cmds(args: &Args, mozart: &MozartExe, report: &mut Report) -> Result<()> {
    let env = Env::new(mozart)?;
    seed_registry(&env.home.join("registry.db"), REGISTRY_JOBS)?;
    let conductor = Conductor::start(&env)?;
    std::thread::sleep(Duration::from_millis(300));
    operator_rows(&env, args.reps, report)?;
    conductor.stop(&env)
}
