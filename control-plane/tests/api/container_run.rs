//! The binary run the way the image (`deploy/container/Dockerfile`) runs it: as user and
//! group 10001, with nothing writable but its data folder, configured by the image's
//! variables: `warden migrate` (the upgrade's step), then a control plane and a proxy
//! that start, answer their probes and `warden probe` (the image's health check), and
//! stop cleanly on SIGTERM. No container engine runs here, so the user and the paths
//! are what is reproduced.

use std::net::TcpListener;
use std::os::unix::fs::chown;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The image's user and group.
const IMAGE_UID: u32 = 10001;
const TOKEN: &str = "container-run-service-token-0123456789";

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `warden` with `args`, as the image's user (when the tests run as root, as in CI),
/// in `data` with the image's variables and `envs`.
fn warden(data: &Path, args: &[&str], envs: &[(&str, String)]) -> Command {
    let binary = env!("CARGO_BIN_EXE_warden");
    let mut command = if is_root() {
        let mut command = Command::new("setpriv");
        command.args([
            "--reuid",
            &IMAGE_UID.to_string(),
            "--regid",
            &IMAGE_UID.to_string(),
            "--clear-groups",
            "--",
            binary,
        ]);
        command
    } else {
        Command::new(binary)
    };
    command
        .args(args)
        .current_dir(data)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", data)
        .env(
            "WARDEN_DATABASE_URL",
            format!("sqlite://{}/warden.db", data.display()),
        )
        .env(
            "WARDEN_PROXY__USAGE_SPOOL_DIR",
            data.join("usage-spool").display().to_string(),
        )
        .env("WARDEN_LOG_FORMAT", "json")
        .env("WARDEN_LOG_LEVEL", "warn")
        .env("WARDEN_SERVICE_TOKEN", TOKEN);
    for (key, value) in envs {
        command.env(key, value);
    }
    command
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Runs `warden probe <plane>` (with the plane's variables `envs`) until it succeeds.
fn probe_until_ready(data: &Path, plane: &str, envs: &[(&str, String)], child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let probed = warden(data, &["probe", plane], envs)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        if probed.success() {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the {plane} exited with {status} before it was ready");
        }
        assert!(
            Instant::now() < deadline,
            "the {plane} never answered ready"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn terminate(child: &mut Child) -> ExitStatus {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "it did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_binary_runs_as_the_image_runs_it() {
    let folder = tempfile::tempdir().unwrap();
    let data = folder.path().join("var-lib-warden");
    std::fs::create_dir(&data).unwrap();
    if is_root() {
        chown(&data, Some(IMAGE_UID), Some(IMAGE_UID)).unwrap();
    }
    let migrated = warden(&data, &["migrate"], &[]).output().unwrap();
    assert!(
        migrated.status.success(),
        "warden migrate: {}",
        String::from_utf8_lossy(&migrated.stderr)
    );

    let (api, agents) = (free_port(), free_port());
    // Listening on every address, as in a container; the probe asks the loopback one.
    let envs = [
        ("WARDEN_LISTEN", format!("0.0.0.0:{api}")),
        ("WARDEN_PROXY__LISTEN", format!("0.0.0.0:{agents}")),
        (
            "WARDEN_PROXY__CONTROL_PLANE_URL",
            format!("http://127.0.0.1:{api}"),
        ),
        ("WARDEN_PROXY__EVENT_LOOPS", "1".to_owned()),
    ];
    let mut control_plane = warden(&data, &["control-plane"], &envs)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    probe_until_ready(&data, "control-plane", &envs, &mut control_plane);
    let mut proxy = warden(&data, &["proxy"], &envs)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Ready once it has the control plane's state.
    probe_until_ready(&data, "proxy", &envs, &mut proxy);
    // The probe fails on a plane that is not there.
    let nothing = warden(
        &data,
        &["probe", &format!("http://127.0.0.1:{}/readyz", free_port())],
        &[],
    )
    .output()
    .unwrap();
    assert!(!nothing.status.success());

    // It wrote only into its data folder: the database and the spool.
    let mut written: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert!(written.contains(&"warden.db".to_owned()), "{written:?}");
    assert!(written.contains(&"usage-spool".to_owned()), "{written:?}");

    let proxy_stopped = terminate(&mut proxy);
    let control_plane_stopped = terminate(&mut control_plane);
    assert!(proxy_stopped.success(), "proxy: {proxy_stopped}");
    assert!(
        control_plane_stopped.success(),
        "control plane: {control_plane_stopped}"
    );
}
