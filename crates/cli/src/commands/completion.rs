//! `mozart completion bash|zsh|fish` and `mozart man` (ours, not upstream's — upstream
//! disables Typer's completion): generated from the clap tree, so they never drift from
//! the real options. Score IDs complete live from the conductor when it is up, through the
//! hidden `mozart __complete-jobs`.

use std::io::Write;
use std::path::PathBuf;

use clap_complete::Shell;
use mozart_ipc::status::JobList;

use crate::{CliError, Globals};

/// Commands whose first positional argument is a score ID.
pub const JOB_COMMANDS: [&str; 11] = [
    "status", "pause", "resume", "cancel", "modify", "errors", "diagnose", "history", "recover",
    "wait", "logs",
];

/// Arguments of `mozart completion`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell: bash, zsh or fish.
    #[arg(value_name = "SHELL", value_parser = ["bash", "zsh", "fish"])]
    pub shell: String,
}

fn live_hook(shell: &str) -> String {
    let cmds = JOB_COMMANDS.join(" ");
    match shell {
        "bash" => format!(
            r#"
# Score IDs from the running conductor.
_mozart_live() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}"
    if [[ $COMP_CWORD -ge 2 && "$cur" != -* ]]; then
        case " {cmds} " in
            *" ${{COMP_WORDS[1]}} "*)
                if [[ $COMP_CWORD -eq 2 ]]; then
                    COMPREPLY=( $(compgen -W "$(mozart __complete-jobs 2>/dev/null)" -- "$cur") )
                    return 0
                fi ;;
        esac
    fi
    _mozart "$@"
}}
complete -F _mozart_live -o nosort -o bashdefault -o default mozart
"#
        ),
        "zsh" => format!(
            r#"
# Score IDs from the running conductor.
_mozart_live() {{
    if (( CURRENT == 3 )) && [[ " {cmds} " == *" ${{words[2]}} "* ]] && [[ "${{words[CURRENT]}}" != -* ]]; then
        local -a ids
        ids=( ${{(f)"$(mozart __complete-jobs 2>/dev/null)"}} )
        compadd -a ids
        return
    fi
    _mozart "$@"
}}
compdef _mozart_live mozart
"#
        ),
        _ => format!(
            "\n# Score IDs from the running conductor.\ncomplete -c mozart -n '__fish_seen_subcommand_from {cmds}' -f -a '(mozart __complete-jobs 2>/dev/null)'\n"
        ),
    }
}

/// Run `mozart completion`.
pub fn run(args: Args) -> Result<i32, CliError> {
    let shell = match args.shell.as_str() {
        "bash" => Shell::Bash,
        "zsh" => Shell::Zsh,
        _ => Shell::Fish,
    };
    let mut cmd = offered(crate::command_tree());
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "mozart", &mut out);
    out.extend_from_slice(live_hook(&args.shell).as_bytes());
    let _ = std::io::stdout().write_all(&out);
    Ok(0)
}

/// The tree a shell completes: every command but the hidden internal ones (`__watchdog`,
/// `__complete-jobs`), which clap's generators would offer.
fn offered(tree: clap::Command) -> clap::Command {
    let mut cmd = clap::Command::new("mozart");
    for arg in tree.get_arguments() {
        cmd = cmd.arg(arg.clone());
    }
    for sub in tree.get_subcommands().filter(|s| !s.is_hide_set()) {
        cmd = cmd.subcommand(sub.clone());
    }
    cmd
}

/// `mozart __complete-jobs`: the conductor's score IDs, one a line; nothing (and exit 0)
/// when no conductor answers, so a shell never shows an error mid-completion.
pub fn complete_jobs(globals: &Globals) -> Result<i32, CliError> {
    let Ok(paths) = crate::conductor_client::paths(globals, None) else {
        return Ok(0);
    };
    let timeouts = mozart_ipc::ClientTimeouts {
        connect: std::time::Duration::from_millis(300),
        response: std::time::Duration::from_secs(2),
    };
    let Ok(mut client) = mozart_ipc::BlockingClient::connect_with(&paths.socket, timeouts) else {
        return Ok(0);
    };
    let Ok(list) = client.call::<_, JobList>(mozart_ipc::methods::JOB_LIST, ()) else {
        return Ok(0);
    };
    let mut out = String::new();
    for job in &list.0 {
        out.push_str(job.job_id());
        out.push('\n');
    }
    let _ = std::io::stdout().write_all(out.as_bytes());
    Ok(0)
}

/// Arguments of `mozart man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write `mozart.1` and one page per command (`mozart-run.1`, …) into this directory
    /// instead of printing `mozart.1`.
    #[arg(short = 'o', long = "out-dir", value_name = "DIRECTORY")]
    pub out_dir: Option<PathBuf>,
}

/// Run `mozart man`.
pub fn man(args: ManArgs) -> Result<i32, CliError> {
    let cmd = crate::command_tree().version(env!("CARGO_PKG_VERSION"));
    let io =
        |e: std::io::Error| CliError::failed(format!("Cannot write the man page: {e}"), vec![]);
    let Some(dir) = args.out_dir else {
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut out).map_err(io)?;
        let _ = std::io::stdout().write_all(&out);
        return Ok(0);
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let mut written = 0;
    let mut page = |name: String, c: clap::Command| -> Result<(), CliError> {
        let mut out = Vec::new();
        clap_mangen::Man::new(c)
            .title(name.to_uppercase())
            .render(&mut out)
            .map_err(io)?;
        std::fs::write(dir.join(format!("{name}.1")), out).map_err(io)?;
        written += 1;
        Ok(())
    };
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("mozart-{}", sub.get_name());
        page(name, sub.clone())?;
    }
    page("mozart".into(), cmd)?;
    println!(
        "Wrote {} to {}",
        mozart_config::plural(written, "man page", "man pages"),
        dir.display()
    );
    Ok(0)
}
