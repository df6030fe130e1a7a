//! Issue 6: long twin runs save their state atomically and resume bit-identically.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn tokensel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tokensel"))
        .args(args)
        .output()
        .expect("binary runs")
}

fn digest(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["trajectory_digest"].as_str().unwrap().to_string()
}

fn config(dir: &Path, steps: u64) -> String {
    let path = dir.join("cfg.toml");
    std::fs::write(
        &path,
        format!(
            "d = 40\nn_train = 6\nn_test = 10\nmu_norm = 5.0\nstep_size = 0.05\nsteps = {steps}\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// A run stopped abruptly after step 35 (state saved every 7 steps) and resumed gives
/// the same trajectory bits as an uninterrupted run; resuming under another config is
/// refused with exit code 2.
#[test]
fn stopped_and_resumed_twin_run_is_bit_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 60);
    let state = tmp.path().join("state.json");
    let st = state.to_str().unwrap();
    let whole = digest(&tokensel(&[
        "twin", "--quiet", "--json", "--prec", "128", "--config", &cfg,
    ]));
    let o = tokensel(&[
        "twin",
        "--quiet",
        "--json",
        "--prec",
        "128",
        "--config",
        &cfg,
        "--state",
        st,
        "--save-every",
        "7",
        "--stop-after",
        "35",
    ]);
    assert_eq!(o.status.code(), Some(3), "simulated crash");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(saved["step"], 35);
    let resumed = digest(&tokensel(&[
        "twin", "--quiet", "--json", "--prec", "128", "--config", &cfg, "--state", st, "--resume",
    ]));
    assert_eq!(resumed, whole);
    // another precision or config: refused
    let o = tokensel(&[
        "twin", "--quiet", "--prec", "256", "--config", &cfg, "--state", st, "--resume",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = tokensel(&[
        "twin", "--quiet", "--prec", "128", "--steps", "61", "--config", &cfg, "--state", st,
        "--resume",
    ]);
    assert_eq!(o.status.code(), Some(2));
    // a corrupted state file: refused, exit 2
    std::fs::write(&state, "{\"format\": \"tokensel-twin-state/1\", \"step\": ").unwrap();
    let o = tokensel(&[
        "twin", "--quiet", "--prec", "128", "--config", &cfg, "--state", st, "--resume",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

/// A real SIGKILL at an arbitrary moment leaves either no state or a complete one (no
/// temporary file, no truncated JSON), and resuming from it reproduces the bits.
#[test]
fn killed_twin_run_leaves_a_valid_state_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 300);
    let state = tmp.path().join("state.json");
    let st = state.to_str().unwrap();
    let whole = digest(&tokensel(&[
        "twin", "--quiet", "--json", "--prec", "1024", "--config", &cfg,
    ]));
    for wait_ms in [150u64, 400] {
        let _ = std::fs::remove_file(&state);
        let mut child = Command::new(env!("CARGO_BIN_EXE_tokensel"))
            .args([
                "twin",
                "--quiet",
                "--json",
                "--prec",
                "1024",
                "--config",
                &cfg,
                "--state",
                st,
                "--save-every",
                "5",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(wait_ms));
        let _ = child.kill();
        let _ = child.wait();
        let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp"))
            .collect();
        // a temporary file may survive a kill mid-write, but the state itself is whole
        if state.exists() {
            let text = std::fs::read_to_string(&state).unwrap();
            serde_json::from_str::<serde_json::Value>(&text).expect("complete JSON");
        }
        let resumed = digest(&tokensel(&[
            "twin", "--quiet", "--json", "--prec", "1024", "--config", &cfg, "--state", st,
            "--resume",
        ]));
        assert_eq!(
            resumed, whole,
            "killed after {wait_ms} ms (temp files: {leftovers:?})"
        );
    }
}
