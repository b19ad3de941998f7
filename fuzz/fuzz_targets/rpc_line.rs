//! One NDJSON request stream through the conductor's framing and dispatch: the bytes are
//! split by `framing::read_line` (with a small cap so the too-large path is exercised too)
//! and every line goes through `server::process_line`, which must answer with one valid
//! JSON-RPC response line or nothing (notification) — never panic (conductor.md §7.5).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mozart_ipc::framing::{read_line, LineRead};
use mozart_ipc::jsonrpsee::Methods;
use mozart_ipc::server::process_line;
use mozart_ipc::RpcModule;

fn methods() -> Methods {
    let mut module = RpcModule::new(());
    // Echo and a failing method: enough to reach the success and error paths of dispatch.
    let _ = module.register_method("echo", |params, _, _| {
        params.as_str().unwrap_or("{}").to_string()
    });
    let _ = module.register_method(
        "fail",
        |_, _, _| -> Result<(), mozart_ipc::ErrorObjectOwned> {
            Err(mozart_ipc::ErrorObjectOwned::owned(
                -32000, "failed", None::<()>,
            ))
        },
    );
    module.into()
}

fuzz_target!(|data: &[u8]| {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    let methods = methods();
    rt.block_on(async {
        let mut reader = tokio::io::BufReader::with_capacity(7, data);
        let mut buf = Vec::new();
        loop {
            match read_line(&mut reader, &mut buf, 4096).await {
                Ok(LineRead::Line) => {
                    if let Some(response) = process_line(&methods, &buf).await {
                        let value: serde_json::Value =
                            serde_json::from_str(&response).expect("every response line is JSON");
                        assert_eq!(value["jsonrpc"], "2.0", "{response}");
                        assert!(
                            value.get("result").is_some() != value.get("error").is_some(),
                            "exactly one of result/error: {response}"
                        );
                        assert!(!response.contains('\n'), "one line: {response:?}");
                    }
                }
                Ok(LineRead::Eof) | Ok(LineRead::TooLarge) | Err(_) => break,
            }
        }
    });
});
