//! The official provider SDKs for Python, as agents use them, run against the proxy by
//! the scripts beside this file (`openai_sdk.py`, `anthropic_sdk.py`), each in a virtual
//! environment with its SDK from PyPI.

use serde_json::Value;

use crate::python::venv_python;

/// Runs `script` (a file of this folder) with the Python of environment `venv`, which
/// has `package` installed, and `args`; the JSON object it prints.
pub async fn run(venv: &'static str, package: &'static str, script: &str, args: &[&str]) -> Value {
    let script = format!("{}/tests/api/proxy/{script}", env!("CARGO_MANIFEST_DIR"));
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let output = tokio::task::spawn_blocking(move || {
        let python = venv_python(venv, &[package]);
        std::process::Command::new(python)
            .arg(script)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}
