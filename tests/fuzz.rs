//! Random input to the parsers (config TOML, trajectory JSON): errors, never panics.

use std::path::Path;

use proptest::prelude::*;
use tokensel::config::Config;
use tokensel::io::trajectory::Trajectory;

const VALID: &str =
    "seed = 3\nd = 40\nn_train = 5\neta = 0.2\n[layout]\ntokens = 8\n[init]\np = \"gaussian\"\n";

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_the_parsers(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = Config::from_toml_str(&text, Path::new("fuzz"));
        let _ = Trajectory::from_json(&text, Path::new("fuzz"));
    }

    /// Mutating one byte of a valid config, or truncating it, gives a config or a typed
    /// input error; whatever parses survives a round trip through `to_toml` unchanged
    /// (so the printed config of a run, `tokensel config`, reproduces it).
    #[test]
    fn mutated_configs_parse_or_fail_cleanly(pos in 0usize..VALID.len(), byte in any::<u8>(), cut in 0usize..VALID.len()) {
        let mut b = VALID.as_bytes().to_vec();
        b[pos] = byte;
        for text in [String::from_utf8_lossy(&b).into_owned(), VALID[..cut].to_string()] {
            match Config::from_toml_str(&text, Path::new("fuzz")) {
                Ok(cfg) => {
                    let again = Config::from_toml_str(&cfg.to_toml(), Path::new("again"));
                    prop_assert_eq!(again.ok(), Some(cfg));
                }
                Err(e) => prop_assert!(e.is_input_error() || e.is_stopped_run(), "{}", e),
            }
        }
    }
}

/// Truncated and corrupted trajectory files are refused with a parse error.
#[test]
fn corrupted_trajectories_are_refused() {
    let cfg = Config {
        d: 10,
        n_train: 3,
        n_test: 3,
        steps: 5,
        ..Config::default()
    };
    let data = tokensel::data::Dataset::generate(&cfg);
    let t = tokensel::train::Trainer::run(&cfg, &data, tokensel::arith::F64, &mut |_| {}).unwrap();
    let text = t.to_json();
    assert_eq!(Trajectory::from_json(&text, Path::new("t")).unwrap(), t);
    for cut in [0, 1, text.len() / 3, text.len() - 2] {
        let e = Trajectory::from_json(&text[..cut], Path::new("t")).unwrap_err();
        assert!(e.is_input_error(), "{e}");
    }
    let wrong = text.replace("tokensel-trajectory/2", "tokensel-trajectory/1");
    let e = Trajectory::from_json(&wrong, Path::new("t")).unwrap_err();
    assert!(e.to_string().contains("format"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every file-reading command, fed random bytes (or a random mutation of a valid
    /// trajectory), exits 0 or 2: never a panic (101) or an abort, never 1 or 3.
    #[test]
    fn random_files_never_panic_a_command(bytes in proptest::collection::vec(any::<u8>(), 0..300), pos in 0usize..4000, byte in any::<u8>()) {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("input");
        let valid = valid_trajectory_text();
        let mut mutated = valid.as_bytes().to_vec();
        let k = pos % mutated.len();
        mutated[k] = byte;
        for content in [bytes.clone(), mutated] {
            std::fs::write(&f, &content).unwrap();
            let fp = f.to_str().unwrap();
            let svg = tmp.path().join("x.svg");
            let state = tmp.path().join("state.json");
            std::fs::write(&state, &content).unwrap();
            for args in [
                vec!["run", "--quiet", "--steps", "2", "--config", fp],
                vec!["check", fp],
                vec!["diff", fp, fp],
                vec!["plot", fp, "--out", svg.to_str().unwrap()],
                vec!["twin", "--quiet", "--steps", "2", "--prec", "64", "--state", state.to_str().unwrap(), "--resume"],
            ] {
                let o = std::process::Command::new(env!("CARGO_BIN_EXE_tokensel")).args(&args).output().unwrap();
                let code = o.status.code();
                prop_assert!(matches!(code, Some(0) | Some(2)), "{:?}: exit {:?}: {}", args, code, String::from_utf8_lossy(&o.stderr));
            }
        }
    }
}

/// A small valid trajectory's JSON text (computed once).
fn valid_trajectory_text() -> &'static str {
    use std::sync::OnceLock;
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let cfg = Config {
            d: 6,
            n_train: 2,
            n_test: 2,
            steps: 2,
            ..Config::default()
        };
        let data = tokensel::data::Dataset::generate(&cfg);
        tokensel::train::Trainer::run(&cfg, &data, tokensel::arith::F64, &mut |_| {})
            .unwrap()
            .to_json()
    })
}
