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
    let wrong = text.replace("tokensel-trajectory/1", "tokensel-trajectory/0");
    let e = Trajectory::from_json(&wrong, Path::new("t")).unwrap_err();
    assert!(e.to_string().contains("format"), "{e}");
}
