//! The conductor's lifecycle and protocol, through the real binary and a real socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use mozart_ipc::types::DaemonStatus;
use mozart_ipc::{methods, Client};
use mozart_tests::{alive, stdout, TestEnv};

/// Send raw bytes on a fresh connection and read one reply line.
fn raw(socket: &std::path::Path, bytes: &[u8]) -> serde_json::Value {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(bytes).unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad reply {line:?}: {e}"))
}

#[test]
fn start_status_second_start_refused_stop() {
    let env = TestEnv::new();
    let out = env.start_conductor();
    let text = stdout(&out);
    assert!(text.contains("Mozart conductor started (PID"), "{text}");
    assert!(
        text.contains("conductor.log"),
        "start names the log: {text}"
    );
    let pid = env.conductor_pid().expect("PID file written");

    let out = env.mozart(&["conductor-status"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("Mozart conductor is running (PID {pid})")),
        "{text}"
    );
    assert!(text.contains("[+] Readiness: ready"), "{text}");
    assert!(text.contains("Accepting work: yes"), "{text}");

    let out = env.mozart(&["conductor-status", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["running"], true);
    assert_eq!(json["status"]["pid"], pid);
    assert_eq!(json["ready"]["status"], "ready");

    // Idempotent: a second start says so and succeeds (upstream exits 1).
    let out = env.mozart(&["start"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        format!(
            "Mozart conductor is already running (PID {pid})\n  Socket: {}\n",
            env.socket.display()
        )
    );
    assert_eq!(
        env.conductor_pid(),
        Some(pid),
        "the first conductor is untouched"
    );

    let out = env.stop_conductor();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(!alive(pid), "stop waits until the conductor is gone");
    assert!(!env.socket.exists(), "socket removed on graceful stop");
    assert!(
        env.conductor_pid().is_none(),
        "PID file removed on graceful stop"
    );

    let out = env.mozart(&["conductor-status"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out).trim(), "Mozart conductor is not running");
    let out = env.mozart(&["stop"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_clone_runs_beside_production_with_its_own_socket_and_registry() {
    let env = TestEnv::new();
    env.start_conductor();
    let out = env.mozart(&["--conductor-clone=t1", "start"]);
    assert!(out.status.success(), "{}\n{}", stdout(&out), env.log());
    assert!(
        stdout(&out).contains("clone conductor started"),
        "{}",
        stdout(&out)
    );
    let clone_socket = env.root().join("mozart-clone-t1.sock");
    assert!(clone_socket.exists());

    let prod = env.mozart(&["conductor-status", "--json"]);
    let clone = env.mozart(&["--conductor-clone=t1", "conductor-status", "--json"]);
    let prod: serde_json::Value = serde_json::from_slice(&prod.stdout).unwrap();
    let clone: serde_json::Value = serde_json::from_slice(&clone.stdout).unwrap();
    assert_eq!(prod["running"], true);
    assert_eq!(clone["running"], true);
    assert_ne!(prod["pid"], clone["pid"]);
    assert_eq!(clone["socket"], clone_socket.display().to_string());

    let out = env.mozart(&["--conductor-clone=t1", "start"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).starts_with("clone conductor is already running"));

    let out = env.mozart(&["--conductor-clone=t1", "stop"]);
    assert!(out.status.success());
    assert!(!clone_socket.exists());
    let prod_after = env.mozart(&["conductor-status"]);
    assert_eq!(
        prod_after.status.code(),
        Some(0),
        "production survives the clone's stop"
    );
}

/// `--socket PATH` means the conductor listening there, not the one whose lock and PID
/// file are in the home: `conductor-status` and `stop` of a socket where nothing listens
/// say where the home's conductor listens instead (and stop nothing), and `stop --socket`
/// of the clone's socket stops the clone and returns at once, production untouched.
#[test]
fn stop_and_conductor_status_with_a_socket_mean_the_conductor_listening_there() {
    let env = TestEnv::new();
    env.start_conductor();
    let prod_pid = env.conductor_pid().unwrap();
    let nowhere = env.root().join("nobody.sock");
    let nowhere = nowhere.to_str().unwrap();
    let out = env.mozart(&["conductor-status", "--socket", nowhere]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!(
            "runs, listening on {}, not on {nowhere}",
            env.socket.display()
        )),
        "{}",
        stdout(&out)
    );
    let out = env.mozart(&["stop", "--socket", nowhere]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        alive(prod_pid),
        "stop --socket {nowhere} stopped production"
    );

    let out = env.mozart(&["--conductor-clone=s1", "start"]);
    assert!(out.status.success(), "{}\n{}", stdout(&out), env.log());
    let clone_socket = env.root().join("mozart-clone-s1.sock");
    let out = env.mozart(&[
        "conductor-status",
        "--socket",
        clone_socket.to_str().unwrap(),
        "--json",
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["running"], true, "{doc:#}");
    assert_ne!(doc["pid"], prod_pid, "{doc:#}");
    let started = Instant::now();
    let out = env.mozart(&["stop", "--socket", clone_socket.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "stop waited for production to exit"
    );
    assert!(!clone_socket.exists());
    assert!(
        alive(prod_pid),
        "stop --socket of the clone stopped production"
    );
    assert_eq!(env.mozart(&["conductor-status"]).status.code(), Some(0));
}

/// A PID file naming a process that runs but is not the conductor (`echo 1 >
/// conductor.pid`, a PID reused after a reboot): `start` said "PID 1 is no longer running",
/// untrue; it now says the process runs but is not this conductor (the lock is free), and
/// starts.
#[test]
fn a_pid_file_naming_another_running_process_is_said_to_be_stale_truthfully() {
    let env = TestEnv::new();
    std::fs::create_dir_all(&env.home).unwrap();
    let me = std::process::id();
    std::fs::write(env.home.join("conductor.pid"), me.to_string()).unwrap();
    let out = env.start_conductor();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "Cleaned up stale PID file (PID {me} is running but is not this conductor: it does \
             not hold the conductor's lock"
        )),
        "{text}"
    );
    assert!(!text.contains("no longer running"), "{text}");
    assert_ne!(env.conductor_pid(), Some(me));
}

/// `mozart stop --force` signals the process the PID file names only if it holds the
/// conductor's lock: a PID file naming another process (edited; a PID reused) made it SIGKILL
/// that process — as root, init for `1`. It refuses now, saying why, and the process lives;
/// a plain stop still stops the conductor through its socket.
#[test]
fn stop_never_signals_a_process_the_pid_file_names_that_is_not_the_conductor() {
    let env = TestEnv::new();
    env.start_conductor();
    let conductor = env.conductor_pid().unwrap();
    let mut bystander = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let other = bystander.id();
    std::fs::write(env.home.join("conductor.pid"), other.to_string()).unwrap();
    let out = env.mozart(&["stop", "--force"]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("names PID {other}, which is not the conductor")),
        "{text}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "the bystander was signalled: {text}"
    );
    assert!(alive(conductor));
    let out = env.mozart(&["stop", "--yes"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(conductor) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(conductor), "a plain stop still stops the conductor");
    let _ = bystander.kill();
    let _ = bystander.wait();
}

#[test]
fn kill_9_leaves_stale_files_that_the_next_start_cleans() {
    let env = TestEnv::new();
    env.start_conductor();
    let pid = env.conductor_pid().unwrap();
    let out = env.mozart(&["stop", "--force"]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains(&format!("Sent SIGKILL to Mozart conductor (PID {pid})")));

    // A raw kill -9 leaves socket and PID file behind.
    env.start_conductor();
    let pid = env.conductor_pid().unwrap();
    mozart_tests::signal(pid, "KILL");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(env.socket.exists() && env.conductor_pid() == Some(pid));
    // (The lock goes with the killed process's last thread, a moment after its leader.)
    wait_threads_gone(pid);

    let out = env.start_conductor();
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "Cleaned up stale PID file (PID {pid} is no longer running)"
        )),
        "{text}"
    );
    assert_ne!(env.conductor_pid(), Some(pid));
    assert_eq!(env.mozart(&["conductor-status"]).status.code(), Some(0));

    // Status alone also sees through the leftovers of a kill -9.
    let pid = env.conductor_pid().unwrap();
    mozart_tests::signal(pid, "KILL");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The kernel drops the killed process's lock once its last thread has exited, which
    // can be a moment after the leader already shows as dead.
    wait_threads_gone(pid);
    let code = env.mozart(&["conductor-status"]).status.code();
    assert_eq!(code, Some(1), "a dead conductor is not running");
}

#[test]
fn the_socket_is_private() {
    let env = TestEnv::new();
    let socket = env.root().join("private/m.sock");
    let out = env
        .command(&["start"])
        .env("MOZART_SOCKET", &socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", stdout(&out), env.log());
    let dir_mode = std::fs::metadata(socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    let sock_mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    assert_eq!(sock_mode & 0o777, 0o600);
    let out = env
        .command(&["stop"])
        .env("MOZART_SOCKET", &socket)
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn bad_requests_get_the_right_errors_without_disturbing_another_client() {
    let env = TestEnv::new();
    env.start_conductor();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A well-behaved client holds its connection open across all the abuse below.
    let mut good = runtime.block_on(Client::connect(&env.socket)).unwrap();

    let r = raw(&env.socket, b"{this is not json\n");
    assert_eq!(r["error"]["code"], -32700);
    assert_eq!(r["id"], serde_json::Value::Null);

    let r = raw(
        &env.socket,
        b"{\"jsonrpc\":\"2.0\",\"method\":\"no.such\",\"id\":5}\n",
    );
    assert_eq!(r["error"]["code"], -32601);
    assert_eq!(r["error"]["message"], "Method not found: no.such");
    assert_eq!(r["id"], 5);

    let r = raw(
        &env.socket,
        b"{\"jsonrpc\":\"2.0\",\"params\":{},\"id\":6}\n",
    );
    assert_eq!(r["error"]["code"], -32600);

    // A missing required param is named the way upstream's CLI expects (§8).
    let r = raw(
        &env.socket,
        b"{\"jsonrpc\":\"2.0\",\"method\":\"job.submit\",\"id\":7}\n",
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["message"], "Invalid params: 'config_path'");

    // Over the 16 MiB line limit: a parse error, then the connection closes.
    let mut big = vec![b' '; 16 * 1024 * 1024 + 10];
    big.push(b'\n');
    let r = raw(&env.socket, &big);
    assert_eq!(r["error"]["code"], -32700);

    // A notification gets no reply: the next line's answer is the first one we read.
    let r = raw(
        &env.socket,
        b"{\"jsonrpc\":\"2.0\",\"method\":\"daemon.health\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"daemon.hello\",\"id\":9}\n",
    );
    assert_eq!(r["id"], 9);
    assert_eq!(
        r["result"]["protocol_version"],
        mozart_ipc::PROTOCOL_VERSION
    );

    let status: DaemonStatus = runtime
        .block_on(good.call(methods::DAEMON_STATUS, ()))
        .unwrap();
    assert_eq!(Some(status.pid), env.conductor_pid());
}

#[test]
fn two_hundred_clients_times_fifty_calls_are_all_answered() {
    let env = TestEnv::new();
    env.start_conductor();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let answered: usize = runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..200 {
            let socket = env.socket.clone();
            tasks.spawn(async move {
                let mut client = Client::connect(&socket).await.unwrap();
                let mut ok = 0;
                for _ in 0..50 {
                    let s: DaemonStatus = client.call(methods::DAEMON_STATUS, ()).await.unwrap();
                    assert!(s.pid > 0);
                    ok += 1;
                }
                ok
            });
        }
        let mut total = 0;
        while let Some(done) = tasks.join_next().await {
            total += done.unwrap();
        }
        total
    });
    assert_eq!(answered, 10_000);
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "took {:?}",
        started.elapsed()
    );
    // The conductor is still healthy afterwards.
    assert_eq!(env.mozart(&["conductor-status"]).status.code(), Some(0));
}

#[test]
fn restart_works_whether_or_not_a_conductor_runs() {
    let env = TestEnv::new();
    let out = env.mozart(&["restart"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let first = env.conductor_pid().unwrap();
    let out = env.mozart(&["restart"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let second = env.conductor_pid().unwrap();
    assert_ne!(first, second);
    assert!(!alive(first));
}

#[test]
fn an_invalid_conductor_yaml_is_reported_before_anything_starts() {
    let env = TestEnv::new();
    std::fs::write(env.home.join("conductor.yaml"), "socket:\n  bogus: 1\n").unwrap();
    let out = env.mozart(&["start"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("bogus"), "the unknown field is named: {text}");
    assert!(!env.socket.exists());
}

#[test]
fn conductor_yaml_reads_yaml_1_1_booleans_as_a_score_does() {
    // `enabled: yes` works in a score; the same word in conductor.yaml must mean the same.
    let env = TestEnv::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        env.home.join("conductor.yaml"),
        format!("dashboard:\n  enabled: yes\n  port: {port}\nprofiler:\n  enabled: on\n"),
    )
    .unwrap();
    let out = env.mozart(&["start"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "`enabled: yes` did not serve the dashboard on {addr}; log:\n{}",
            env.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sighup_reloads_conductor_yaml_without_dropping_clients() {
    let env = TestEnv::new();
    let config = env.home.join("conductor.yaml");
    std::fs::write(&config, "max_concurrent_jobs: 4\n").unwrap();
    env.start_conductor();
    let pid = env.conductor_pid().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut client = runtime.block_on(Client::connect(&env.socket)).unwrap();
    let before: serde_json::Value = runtime
        .block_on(client.call(methods::DAEMON_CONFIG, ()))
        .unwrap();
    assert_eq!(before["max_concurrent_jobs"], 4);

    std::fs::write(
        &config,
        "max_concurrent_jobs: 9\nsocket: {path: /tmp/elsewhere.sock}\n",
    )
    .unwrap();
    mozart_tests::signal(pid, "HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut after = serde_json::Value::Null;
    while Instant::now() < deadline {
        after = runtime
            .block_on(client.call(methods::DAEMON_CONFIG, ()))
            .unwrap();
        if after["max_concurrent_jobs"] == 9 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        after["max_concurrent_jobs"], 9,
        "reloaded on the same connection"
    );
    // daemon.config names the socket in use (upstream's model refuses a null path); a
    // reload does not move it.
    assert_eq!(
        after["socket"]["path"],
        env.socket.display().to_string(),
        "socket is not reloadable"
    );
    assert!(alive(pid));
    assert!(env.socket.exists());
}

/// Wait (up to 5 s) until every thread of a killed process has exited: its file locks are
/// released only then, possibly a moment after the leader already shows as dead.
fn wait_threads_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.count())
            .unwrap_or(0);
        if threads <= 1 {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A FIFO at `path` open for reading, without blocking: once it has no writer left, a read
/// returns end-of-file; while anyone holds its write end, a read would block.
fn fifo_reader(path: &std::path::Path) -> std::fs::File {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .unwrap()
}

/// True once nobody holds the FIFO's write end (waits up to `within` for stragglers).
fn writers_gone(reader: &mut std::fs::File, within: Duration) -> bool {
    let until = Instant::now() + within;
    let mut buf = [0u8; 64];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("reading the FIFO: {e}"),
        }
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `mozart ARGS` as run by a caller holding `fifo`'s write end as fd 9, not close-on-exec:
/// `sh` opens it, then becomes `mozart`.
fn mozart_holding_fd9(env: &TestEnv, args: &[&str], fifo: &std::path::Path) -> Command {
    let cmd = env.command(args);
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg("exec 9>\"$0\"; exec \"$@\"")
        .arg(fifo)
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(&env.work);
    sh
}

/// `mozart start` under a caller that handed it an extra descriptor (a CI runner's or a
/// supervisor's pipe, here fd 9 on a FIFO): the detached conductor outlives the command and
/// must not hold that pipe open, or the caller waits for its end as long as the daemon lives.
#[test]
fn the_detached_conductor_holds_none_of_its_callers_descriptors() {
    let env = TestEnv::new();
    let fifo = env.work.join("caller-pipe");
    let mut reader = fifo_reader(&fifo);
    let out = mozart_holding_fd9(&env, &["start"], &fifo)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    let pid = env.conductor_pid().expect("PID file written");
    assert!(alive(pid));
    let held = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .any(|target| target == fifo)
        })
        .unwrap_or(false);
    assert!(!held, "the conductor (PID {pid}) holds the caller's pipe");
    assert!(
        writers_gone(&mut reader, Duration::from_secs(5)),
        "the caller's pipe is still held open after `mozart start` returned"
    );
    env.stop_conductor();
}

/// A conductor run in the foreground (systemd, a terminal) keeps what it was started with,
/// but its instruments get none of it: a sheet lists its shell's descriptors.
#[test]
fn instruments_get_none_of_the_conductors_inherited_descriptors() {
    let env = TestEnv::new();
    let fifo = env.work.join("caller-pipe");
    let mut reader = fifo_reader(&fifo);
    let mut conductor = mozart_holding_fd9(&env, &["start", "--foreground"], &fifo)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    let ready = || {
        mozart_ipc::BlockingClient::connect(&env.socket)
            .and_then(|mut c| c.call_value("daemon.ready", serde_json::json!({})))
            .is_ok_and(|r| r["status"] == "ready")
    };
    while !ready() {
        assert!(Instant::now() < until, "the conductor did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let score = env.write_score(
        "fds",
        "name: fds\nworkspace: ./fds-ws\ninstrument: shell\nsheet: {size: 1, total_items: 1}\nprompt:\n  template: |\n    RUN: ls -l /proc/$$/fd > \"{{ workspace }}/fds.txt\"\nvalidations:\n  - type: file_exists\n    path: \"{workspace}/fds.txt\"\n",
    );
    let out = env.mozart(&["run", &score.display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("fds");
    let listing = std::fs::read_to_string(env.work.join("fds-ws/fds.txt")).unwrap();
    assert!(
        !listing.contains(&fifo.display().to_string()),
        "the instrument inherited the conductor's caller's pipe:\n{listing}"
    );
    // The conductor itself still holds it, as any foreground program would.
    assert!(!writers_gone(&mut reader, Duration::ZERO));
    env.stop_conductor();
    let _ = conductor.wait();
    assert!(
        writers_gone(&mut reader, Duration::from_secs(5)),
        "the pipe outlived the conductor"
    );
}

/// `mozart start` right after a conductor was killed can still find its lock held for a few
/// milliseconds: it waits for that conductor to be ready, and when the lock turns out free
/// it starts a new conductor instead of waiting out 30 s and leaving none. (Here the "dead
/// conductor" is a lock held for a second by the test, with no socket.)
#[test]
fn start_starts_a_conductor_when_the_one_it_found_was_already_gone() {
    let env = TestEnv::new();
    std::fs::create_dir_all(&env.home).unwrap();
    let lock = std::fs::File::create(env.home.join("conductor.lock")).unwrap();
    lock.lock().unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(1_500));
        drop(lock);
    });
    let started = std::time::Instant::now();
    let out = env.mozart(&["start"]);
    holder.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("is already running"), "{text}");
    assert!(text.contains("starting a new one"), "{text}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{text}"
    );
    let status = env.mozart(&["conductor-status", "--json"]);
    assert_eq!(
        status.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
}

/// `mozart start` whose output nobody reads (`mozart start | head -1`) starts the conductor
/// and ends quietly like other Unix tools: no "failed printing to stdout" panic.
#[test]
fn start_into_a_closed_pipe_starts_the_conductor_without_a_panic() {
    let env = TestEnv::new();
    let mut child = env
        .command(&["start"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    let status = env.mozart(&["conductor-status", "--json"]);
    assert_eq!(status.status.code(), Some(0), "{}", stdout(&status));
}

/// `start --log-level` takes the four levels its help names (any case), and refuses another
/// as a usage error before anything starts (it was taken, and shown "live" by `config show`).
#[test]
fn start_refuses_a_log_level_it_does_not_know() {
    let env = TestEnv::new();
    let out = env.mozart(&["start", "-l", "bogus"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("possible values: debug, info, warning, error"),
        "{err}"
    );
    assert_eq!(env.mozart(&["conductor-status"]).status.code(), Some(1));
    let out = env.mozart(&["start", "-l", "DEBUG"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let out = env.mozart(&["config", "show"]);
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("log_level") && l.contains(" debug ")),
        "{}",
        stdout(&out)
    );
}
