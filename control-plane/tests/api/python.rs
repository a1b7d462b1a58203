//! Python virtual environments for the real components some tests run (moto's AWS
//! Secrets Manager, SMTP and webhook receivers), installed from PyPI on first use.
//!
//! Each environment lives in the workspace's `target/<name>`; it is built beside and
//! renamed into place, so concurrent test processes never see a half-made one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// The Python of the environment `name` with `packages` installed, installing it first
/// if it is missing.
pub fn venv_python(name: &str, packages: &[&str]) -> PathBuf {
    let home = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target")
        .join(name);
    let python = home.join("bin/python");
    if python.exists() {
        return python;
    }
    // One install per process: the tests of both databases ask at once, and would share
    // (and delete) each other's staging folder, named by the process.
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _installing = INSTALLING.lock().unwrap_or_else(PoisonError::into_inner);
    if python.exists() {
        return python;
    }
    // (Run as `python -m`, a virtual environment works from wherever it is moved.)
    let staging = home.with_file_name(format!("{name}-installing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    run(Command::new("python3").arg("-m").arg("venv").arg(&staging));
    run(Command::new(staging.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(packages));
    if std::fs::rename(&staging, &home).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    python
}

fn run(command: &mut Command) {
    let status = command
        .status()
        .unwrap_or_else(|error| panic!("cannot run {command:?}: {error}"));
    assert!(status.success(), "{command:?} failed: {status}");
}
