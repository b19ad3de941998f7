//! `mozart-mock-api [PORT]`: serve the mock model APIs of [`mozart_tests::mock_api`] on
//! 127.0.0.1 until killed, for manual runs of the real CLIs and for `mozart-bench`.
//! Prints `http://127.0.0.1:PORT` on its first line. `MOCK_API_DEBUG=1` logs each request.

fn main() -> std::process::ExitCode {
    let port = match std::env::args().nth(1).map(|p| p.parse::<u16>()) {
        None => 0,
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            eprintln!("mozart-mock-api: the port must be a number 0-65535: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match mozart_tests::mock_api::MockApi::start_on(port) {
        Ok(api) => {
            println!("{}", api.base_url());
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            eprintln!("mozart-mock-api: cannot listen on 127.0.0.1:{port}: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
