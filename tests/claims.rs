//! Claim files (`tokensel check`): the shipped paper claims hold; failures and bad
//! files give exit codes 1 and 2 with the claim and field named.

use std::process::{Command, Output};

mod common;

fn tokensel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tokensel"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("binary runs")
}

/// The shipped paper claims, every claim that names seeds on seed 0 (`check --seeds 0`):
/// the file parses, every claim's source runs and every quantity is measured (a missing
/// one fails), and every run claim that the file requires of ALL its seeds (no
/// `fraction`, expected to hold; measured to hold on seeds 0..10, proofs-notes/settings.md)
/// holds on seed 0. Claims over a share of seeds and grid claims (their boundary is an
/// aggregate over seeds) are not held to one seed. The file's own ten-seed run is the
/// README's `cargo run --release -- check claims/paper.toml` (about 6 min of CPU): a
/// proof, run by hand, not a test.
#[test]
fn paper_claims_hold() {
    let o = tokensel(&["check", "claims/paper.toml", "--seeds", "0", "--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{err}\n{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(err.contains("--seeds 0"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let outcomes = v.as_array().unwrap();
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("claims/paper.toml"),
    )
    .unwrap();
    let file: toml::Value = toml::from_str(&text).unwrap();
    let claims = file["claim"].as_array().unwrap();
    assert_eq!(outcomes.len(), claims.len());
    assert!(outcomes.len() >= 15);
    let mut held = 0;
    for (o, c) in outcomes.iter().zip(claims) {
        assert_eq!(o["name"], c["name"].as_str().unwrap());
        assert_eq!(o["missing"].as_array().unwrap().len(), 0, "{o}");
        if let Some(seeds) = c.get("seeds") {
            assert!(seeds.is_str());
            assert_eq!(o["per_seed"].as_array().unwrap().len(), 1, "{o}");
        }
        let of_all = c.get("fraction").is_none()
            && c.get("expected").is_none()
            && c["source"].as_str() == Some("run");
        if of_all {
            assert_eq!(o["pass"], true, "{o}");
            held += 1;
        }
    }
    assert!(held >= 5, "{held} run claims of all seeds");
}

/// claims/multiclass.toml's machinery on seed 0 (about 1 min of CPU): the file parses,
/// every K-class quantity it names (`classes/selection/noisy/W_observed`, ...) is in the
/// run summary's schema and measured for every claim (none missing), and its outcomes
/// come in file order. What the claims measure over ten seeds is the README's `check
/// claims/multiclass.toml`, run by hand (it exits 1: proofs-notes/multiclass.md).
#[test]
fn multiclass_claims_read_their_k_class_quantities() {
    let o = tokensel(&["check", "claims/multiclass.toml", "--seeds", "0", "--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let outcomes = v.as_array().unwrap();
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("claims/multiclass.toml"),
    )
    .unwrap();
    let file: toml::Value = toml::from_str(&text).unwrap();
    let claims = file["claim"].as_array().unwrap();
    assert_eq!(outcomes.len(), claims.len());
    assert_eq!(outcomes.len(), 18);
    for (o, c) in outcomes.iter().zip(claims) {
        assert_eq!(o["name"], c["name"].as_str().unwrap());
        assert_eq!(o["missing"].as_array().unwrap().len(), 0, "{o}");
        assert_eq!(o["per_seed"].as_array().unwrap().len(), 1, "{o}");
    }
}

/// claims/protocol.toml's machinery on seed 0 (a few seconds): the file parses, every
/// quantity it names is in a protocol row's schema and measured for every claim, in file
/// order, and a claim's value is the row `tokensel protocol --json` prints for that seed.
/// What the claims measure over ten seeds is the README's `check claims/protocol.toml`,
/// run by hand (it exits 1).
#[test]
fn protocol_claims_read_a_seeds_row() {
    let o = tokensel(&["check", "claims/protocol.toml", "--seeds", "0", "--json"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let outcomes = v.as_array().unwrap();
    assert_eq!(outcomes.len(), 7);
    for o in outcomes {
        assert_eq!(o["missing"].as_array().unwrap().len(), 0, "{o}");
        assert_eq!(o["per_seed"].as_array().unwrap().len(), 1, "{o}");
    }
    let p = tokensel(&[
        "protocol",
        "--config",
        "examples/protocol.toml",
        "--seeds",
        "0",
        "--json",
        "--quiet",
    ]);
    assert_eq!(p.status.code(), Some(0), "{}", stderr(&p));
    let report: serde_json::Value = serde_json::from_slice(&p.stdout).unwrap();
    let row = &report["rows"][0];
    let loss = outcomes
        .iter()
        .find(|o| o["quantity"] == "train_loss")
        .expect("a train_loss claim");
    assert_eq!(loss["per_seed"][0][0], 0, "{loss}");
    assert_eq!(loss["per_seed"][0][1], row["train_loss"], "{loss}");
}

/// A claim's lines in `check`'s table: its status and name, then what follows up to the
/// next claim (measured, bound, paper), joined; empty when the name is not there.
fn claim_block(out: &str, name: &str) -> String {
    let lines: Vec<&str> = out.lines().collect();
    let Some(at) = lines.iter().position(|l| l.trim_end().ends_with(name)) else {
        return String::new();
    };
    let rest = lines[at + 1..]
        .iter()
        .take_while(|l| l.starts_with("          "))
        .copied();
    std::iter::once(lines[at])
        .chain(rest)
        .collect::<Vec<_>>()
        .join(" ")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every claim of claims/certified.toml is proved on seed 0 (the certificate's intervals
/// lie inside the bounds: Figure 3(a) and Theorem 4.1 for the balanced setting; `check
/// --seeds 0`, one certified run of 30,000 steps). The file's seeds 0..3 are the README's
/// `cargo run --release -- check claims/certified.toml`, a proof run by hand (about 3
/// min of CPU).
#[test]
fn certified_claims_are_proved() {
    let o = tokensel(&["check", "claims/certified.toml", "--seeds", "0", "--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{err}\n{out}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for c in v.as_array().unwrap() {
        assert_eq!(c["pass"], true, "{c}");
        assert_eq!(c["enclosures"].as_array().unwrap().len(), 1, "{c}");
    }
}

/// A certified claim holds only when the whole interval satisfies it: the loss's
/// enclosure `[lo, hi]` (two f64 ends, lo < hi as the exact loss is not an f64) proves
/// `loss <= hi` (shown `proved`) but not `loss >= hi`, which a point value at `hi` would
/// satisfy (exit 1, measured the deciding end lo); `certified` with a baseline or a
/// non-run source is refused (exit 2).
#[test]
fn certified_claims_read_intervals() {
    let claim = |name: &str, op: &str, bound: f64| {
        format!(
            "[[claim]]\nname = \"{name}\"\n{SMALL}certified = true\nsource = \"run\"\nquantity = \"train_loss\"\nop = \"{op}\"\nbound = {bound:e}\n\n"
        )
    };
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.toml");
    std::fs::write(&path, claim("probe", "<", 10.0)).unwrap();
    let (code, v) = check_json(&path);
    assert_eq!(code, Some(0), "{v}");
    let iv = &v[0]["enclosures"][0][1];
    let (lo, hi) = (iv[0].as_f64().unwrap(), iv[1].as_f64().unwrap());
    assert!(lo < hi, "{iv}");
    let body = claim("upper", "<=", hi) + &claim("straddles", ">=", hi);
    std::fs::write(&path, &body).unwrap();
    let (code, v) = check_json(&path);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v[0]["pass"], true);
    assert_eq!(v[1]["pass"], false);
    assert_eq!(v[1]["measured"].as_f64(), Some(lo));
    let o = tokensel(&["check", path.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("proved")),
        "{out}"
    );
    for extra in ["baseline_step = 0\n", ""] {
        let source = if extra.is_empty() { "compare" } else { "run" };
        let body = format!(
            "[[claim]]\nname = \"c\"\n{SMALL}certified = true\nsource = \"{source}\"\nquantity = \"x\"\nop = \"<\"\nbound = 1\n{extra}"
        );
        let o = claims(&body);
        assert_eq!(o.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&o.stderr).contains("`certified`"));
    }
}

/// `check --json FILE`: the exit code and the outcomes.
fn check_json(path: &std::path::Path) -> (Option<i32>, serde_json::Value) {
    let o = tokensel(&["check", "--json", path.to_str().unwrap()]);
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    (o.status.code(), v)
}

const SMALL: &str = "config = { d = 20, n_train = 4, n_test = 10, steps = 30 }\n";

fn claims(body: &str) -> Output {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.toml");
    std::fs::write(&path, body).unwrap();
    tokensel(&["check", path.to_str().unwrap()])
}

#[test]
fn a_failing_claim_exits_1_and_is_shown() {
    let o = claims(&format!(
        "[[claim]]\nname = \"ok\"\n{SMALL}source = \"run\"\nquantity = \"steps\"\nop = \"==\"\nbound = 30\n\n[[claim]]\nname = \"impossible\"\n{SMALL}source = \"run\"\nquantity = \"train_accuracy\"\nop = \">\"\nbound = 1.0\n"
    ));
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = |name: &str| {
        out.lines()
            .find(|l| l.trim_end().ends_with(name))
            .unwrap_or("")
            .to_string()
    };
    assert!(line("impossible").trim_start().starts_with("FAIL"), "{out}");
    assert!(line(" ok").trim_start().starts_with("pass"), "{out}");
    assert!(out.contains("1 passed, 1 failed"), "{out}");
}

/// A claim over several seeds names the seeds where its bound does not hold, each with
/// its value, in the table and in `--json` (`unsatisfied`), also when the claim passes
/// by its fraction: `seed < 2` over seeds 0..4 fails on seeds 2 and 3.
#[test]
fn a_claim_over_seeds_names_the_seeds_it_fails_on() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.toml");
    let body = |fraction: f64| {
        format!(
            "[[claim]]\nname = \"low seeds\"\n{SMALL}source = \"run\"\nquantity = \"seed\"\nop = \"<\"\nbound = 2\nseeds = \"0..4\"\nfraction = {fraction}\n"
        )
    };
    for (fraction, code) in [(0.5, 0), (0.75, 1)] {
        std::fs::write(&path, body(fraction)).unwrap();
        let o = tokensel(&["check", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(code), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("not satisfied on seeds 2 (2.0000e0), 3 (3.0000e0)"),
            "{out}"
        );
        let (c, v) = check_json(&path);
        assert_eq!(c, Some(code));
        assert_eq!(v[0]["unsatisfied"], serde_json::json!([2, 3]), "{v}");
    }
}

#[test]
fn bad_claim_files_exit_2_naming_claim_and_field() {
    let claim = |extra: &str, q: &str, op: &str| {
        format!(
            "[[claim]]\nname = \"c1\"\n{SMALL}source = \"run\"\nquantity = \"{q}\"\nop = \"{op}\"\nbound = 1\n{extra}"
        )
    };
    let cases = [
        (claim("", "train_accuracy", "=>"), "unknown variant `=>`"),
        (claim("", "no/such/thing", ">="), "`quantity`"),
        (claim("", "selection", ">="), "not a number"),
        (claim("prec = 4\n", "train_accuracy", ">="), "`prec`"),
        (claim("step = 31\n", "train_accuracy", ">="), "`step`"),
        (
            claim("step = 29\n", "train_accuracy", ">="),
            "not a recorded checkpoint",
        ),
        (claim("colour = 1\n", "train_accuracy", ">="), "colour"),
        (
            claim("preset = \"nope\"\n", "train_accuracy", ">="),
            "`preset`",
        ),
        (
            claim("", "train_accuracy", ">=").replace("d = 20", "d = 0"),
            "`config`",
        ),
        (
            claim("", "train_accuracy", ">=").replace("source = \"run\"", "source = \"guess\""),
            "source",
        ),
        (
            claim("", "train_accuracy", ">=").replace("bound = 1", "bound = nan"),
            "`bound`",
        ),
        (claim("tol = -1.0\n", "train_accuracy", ">="), "`tol`"),
        (
            claim("seeds = \"3..1\"\n", "train_accuracy", ">="),
            "`seeds`",
        ),
        (
            claim("seeds = \"a,b\"\n", "train_accuracy", ">="),
            "`seeds`",
        ),
        (
            claim("fraction = 1.5\n", "train_accuracy", ">="),
            "`fraction`",
        ),
        (claim("paper = 1.0\n", "train_accuracy", ">="), "`paper`"),
        (
            claim("expected = \"differs\"\n", "train_accuracy", ">="),
            "`expected`",
        ),
        (
            claim("axes = { d = \"20,30\" }\n", "train_accuracy", ">="),
            "`axes`",
        ),
        (
            claim("", "runs_ok", ">=").replace("source = \"run\"", "source = \"grid\""),
            "`axes`",
        ),
        (
            claim("axes = { dd = \"20,30\" }\n", "runs_ok", ">=")
                .replace("source = \"run\"", "source = \"grid\""),
            "`axes`",
        ),
        (
            claim(
                "axes = { d = \"20,30\" }\nfraction = 0.5\n",
                "runs_ok",
                ">=",
            )
            .replace("source = \"run\"", "source = \"grid\""),
            "`fraction`",
        ),
        ("claim = []\n".to_string(), "no claims"),
        ("[[claim]]\nname = \"x\"\n".to_string(), "missing field"),
        ("not toml at all [".to_string(), "claims"),
    ];
    for (body, needle) in cases {
        let o = claims(&body);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{body}\n→ {err}");
        assert!(
            err.contains(needle),
            "{body}\n→ message lacks {needle}: {err}"
        );
        assert!(!err.contains("panicked"));
    }
    let o = tokensel(&["check", "/nonexistent/claims.toml"]);
    assert_eq!(o.status.code(), Some(2));
}

/// A grid claim runs its grid (all its seeds in one) and reads the merged summary: two
/// points x two seeds make 4 runs, and a claim that cannot hold fails (exit 1).
#[test]
fn grid_claims_read_the_merged_summary() {
    let body = format!(
        "[[claim]]\nname = \"runs\"\n{SMALL}source = \"grid\"\naxes = {{ mu_norm = [3.0, 8.0] }}\nseeds = \"0..2\"\nquantity = \"runs_ok\"\nop = \"==\"\nbound = 4\n\n\
         [[claim]]\nname = \"cannot hold\"\n{SMALL}source = \"grid\"\naxes = {{ mu_norm = [3.0, 8.0] }}\nseeds = \"0..2\"\nquantity = \"points/1/stats/train_accuracy/max\"\nop = \">\"\nbound = 1\n"
    );
    let o = claims(&body);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("1 passed, 1 failed"), "{out}");
}

/// Claims over seeds count the share of seeds that satisfy them; a baseline claim reads
/// the change from a checkpoint; a recorded disagreement (`expected = "differs"`) passes
/// while the claim fails and fails (exit 1, FAIL*) once it holds.
#[test]
fn seeds_baselines_and_recorded_disagreements() {
    let paper = "paper = 1.0\npaper_source = \"test\"\nreason = \"test\"\n";
    let body = format!(
        "[[claim]]\nname = \"over seeds\"\n{SMALL}seeds = \"0..3\"\nfraction = 0.5\nsource = \"run\"\nquantity = \"steps\"\nop = \"==\"\nbound = 30\n\n\
         [[claim]]\nname = \"baseline\"\n{SMALL}source = \"run\"\nbaseline_step = 0\nquantity = \"train_loss\"\nop = \"<\"\nbound = 0\n\n\
         [[claim]]\nname = \"recorded\"\n{SMALL}source = \"run\"\nquantity = \"train_accuracy\"\nop = \">\"\nbound = 1.0\n{paper}expected = \"differs\"\n"
    );
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.toml");
    std::fs::write(&path, &body).unwrap();
    let o = tokensel(&["check", "--json", path.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["per_seed"].as_array().unwrap().len(), 3);
    assert_eq!(v[0]["fraction"][0], 1.0);
    assert!(
        v[1]["measured"].as_f64().unwrap() < 0.0,
        "the loss fell: {}",
        v[1]
    );
    assert_eq!(v[2]["expected"], "differs");
    assert_eq!(v[2]["pass"], true);
    // the same disagreement, once the claim holds, fails
    let holds = body.replace("op = \">\"\nbound = 1.0", "op = \"<=\"\nbound = 1.0");
    std::fs::write(&path, holds).unwrap();
    let o = tokensel(&["check", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("FAIL*"));
}

/// A missing measurement fails a claim whatever it expects: with eta = 0 there is no
/// noisy sample, so `selection/noisy/R` is null; the claim that expects it to hold and
/// the recorded disagreement both FAIL (exit 1), the table says `missing`, and the JSON
/// lists the seeds without a measurement. Catches a `differs` claim passing on a null
/// (a null satisfies no bound, so "the claim does not hold" was vacuously true).
#[test]
fn a_missing_measurement_fails_any_claim() {
    let small = SMALL.replace("steps = 30", "steps = 30, eta = 0.0");
    let paper = "paper = 1.0\npaper_source = \"test\"\nreason = \"test\"\n";
    let body = format!(
        "[[claim]]\nname = \"holds on null\"\n{small}source = \"run\"\nquantity = \"selection/noisy/R\"\nop = \">=\"\nbound = 0\n\n\
         [[claim]]\nname = \"differs on null\"\n{small}seeds = \"0..2\"\nsource = \"run\"\nquantity = \"selection/noisy/R\"\nop = \">\"\nbound = 1\n{paper}expected = \"differs\"\n"
    );
    let o = claims(&body);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    for name in ["holds on null", "differs on null"] {
        let line = claim_block(&out, name);
        assert!(line.trim_start().starts_with("FAIL "), "{out}");
        assert!(line.contains("measured missing"), "{out}");
    }
    assert!(out.contains("0 passed, 2 failed"), "{out}");
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.toml");
    std::fs::write(&path, &body).unwrap();
    let o = tokensel(&["check", "--json", path.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[1]["missing"], serde_json::json!([0, 1]));
    assert_eq!(v[1]["pass"], false);
}

/// A non-finite value tokensel writes (`"inf"`: the score gap of a one-token sample) is
/// a measurement a claim reads; a grid statistic or array entry that the output lacks
/// although its schema has it is a missing measurement (the claim fails, exit 1), not a
/// bad file found after the work; a name with control characters is refused before it.
#[test]
fn infinite_absent_and_badly_named_measurements() {
    let one_token = "config = { d = 20, n_train = 4, n_test = 10, steps = 5, layout = { tokens = 1, relevant = 1, weak_same = 0, weak_opposite = 0, irrelevant = 0 } }\n";
    let o = claims(&format!(
        "[[claim]]\nname = \"gap\"\n{one_token}source = \"run\"\nstep = 5\nquantity = \"samples/0/gap\"\nop = \">=\"\nbound = 1e300\n"
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(out.contains("inf"), "{out}");
    let grid = "config = { d = 20, n_train = 4, n_test = 10, steps = 5 }\nseeds = \"0..2\"\naxes = { eta = \"0.1:0.2:0.1\", rho = [0.05, 0.1] }\nsource = \"grid\"\nop = \">=\"\nbound = 0\n";
    let o = claims(&format!(
        "[[claim]]\nname = \"past the end\"\n{grid}quantity = \"label_noise/5/mean\"\n"
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    let line = claim_block(&out, "past the end");
    assert!(
        line.trim_start().starts_with("FAIL") && line.contains("measured missing"),
        "{out}"
    );
    let o = claims(&format!(
        "[[claim]]\nname = \"ok\\nFAKE pass line\\u001b[31m\"\n{SMALL}source = \"run\"\nquantity = \"steps\"\nop = \"==\"\nbound = 30\n"
    ));
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("control character") && !err.contains('\u{1b}'),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

/// A certified claim of `quantity OP bound` (and `extra` lines) on the small config.
fn certified_claim(name: &str, quantity: &str, op: &str, bound: f64, extra: &str) -> String {
    format!(
        "[[claim]]\nname = \"{name}\"\n{SMALL}certified = true\nsource = \"run\"\nquantity = \"{quantity}\"\nop = \"{op}\"\nbound = {bound:e}\n{extra}\n"
    )
}

/// Certified claims are checked before any work like every other claim: a quantity the
/// certificate does not have (a typo, at the summary or at a checkpoint) or that is not
/// a number (text, a count object) is exit 2 with nothing computed (it was a missing
/// measurement, exit 1, after the work; or exit 2 after it); a run whose ball state is
/// over the memory limit is refused with exit 3 as `certify` refuses it (it allocated
/// toward 46 GiB and aborted, exit 134). The certificate's quantities are still read
/// (intervals, counts' fields, a checkpoint's).
#[test]
fn certified_claims_are_checked_before_the_work() {
    let bad = [
        ("train_los", ""),
        ("train_lss", "step = 10"),
        ("format", ""),
        ("train_correct", ""),
        ("trainer/kind", ""),
    ];
    for (quantity, extra) in bad {
        // a valid claim first: it is not computed either
        let body = certified_claim("first", "train_loss", "<", 10.0, "")
            + &certified_claim("bad", quantity, "<", 1.0, extra);
        let o = claims(&body);
        assert_eq!(o.status.code(), Some(2), "{quantity}: {}", stderr(&o));
        assert!(stderr(&o).contains("`quantity`"), "{}", stderr(&o));
        assert!(!stderr(&o).contains("[1/2]"), "no work: {}", stderr(&o));
    }
    let big = "[[claim]]\nname = \"big\"\nconfig = { d = 4000, n_train = 2000 }\ncertified = true\nsource = \"run\"\nquantity = \"train_loss\"\nop = \"<\"\nbound = 1\n";
    let o = claims(big);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("ball run"), "{}", stderr(&o));
    let good = certified_claim("loss", "train_loss", "<", 10.0, "")
        + &certified_claim("count", "train_correct/of", "==", 4.0, "")
        + &certified_claim("at step 10", "q_norm", ">=", 0.0, "step = 10")
        + &certified_claim("share", "selection/clean/R", "<=", 1.0, "");
    let o = claims(&good);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// `expected = "differs"` on a certified claim passes only when the whole interval lies
/// outside the bound (a disagreement proved); an interval that straddles the bound is
/// undecided and fails (it passed: `!holds` was taken for `differs`). A claim's `prec`
/// is the ball run's precision (it was always 128 bits).
#[test]
fn certified_differs_needs_the_whole_interval_outside_and_prec_is_honoured() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.toml");
    std::fs::write(&path, certified_claim("probe", "train_loss", "<", 10.0, "")).unwrap();
    let (code, v) = check_json(&path);
    assert_eq!(code, Some(0), "{v}");
    let iv = &v[0]["enclosures"][0][1];
    let (lo, hi) = (iv[0].as_f64().unwrap(), iv[1].as_f64().unwrap());
    assert!(lo < hi, "{iv}");
    let differs =
        "expected = \"differs\"\npaper = 1.0\npaper_source = \"test\"\nreason = \"test\"\n";
    let straddles = certified_claim("straddles", "train_loss", ">=", hi, differs);
    std::fs::write(&path, &straddles).unwrap();
    let (code, v) = check_json(&path);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v[0]["pass"], false, "undecided is no disagreement: {v}");
    let outside = certified_claim("outside", "train_loss", ">=", 2.0 * hi + 1.0, differs)
        + &certified_claim("outside below", "train_loss", "<", lo / 2.0, differs);
    std::fs::write(&path, &outside).unwrap();
    let (code, v) = check_json(&path);
    assert_eq!(code, Some(0), "{v}");
    for (prec, ok) in [(128.0, true), (256.0, true), (64.0, true)] {
        let body = certified_claim(
            "prec",
            "trainer/prec_bits",
            "==",
            prec,
            &format!("prec = {prec}"),
        );
        std::fs::write(&path, &body).unwrap();
        let (code, v) = check_json(&path);
        assert_eq!(code == Some(0), ok, "{prec}: {v}");
    }
}

/// `check --seeds` marks its table as not the file's claims, and a seed named twice (in
/// the option or in a claim's `seeds`) is refused with exit 2 before any claim runs: it
/// counted one run twice ("2/2 seeds hold").
#[test]
fn overridden_and_repeated_seeds_are_said_or_refused() {
    let claim = |seeds: &str| {
        format!(
            "[[claim]]\nname = \"c\"\n{SMALL}seeds = \"{seeds}\"\nsource = \"run\"\nquantity = \"steps\"\nop = \"==\"\nbound = 30\n"
        )
    };
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.toml");
    std::fs::write(&path, claim("0..2")).unwrap();
    let p = path.to_str().unwrap();
    let o = tokensel(&["check", p, "--seeds", "3,4"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(out.contains("seeds overridden (--seeds 3,4)"), "{out}");
    assert!(out.contains("2/2 seeds hold"), "{out}");
    let o = tokensel(&["check", p, "--seeds", "0,0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("appears twice"), "{}", stderr(&o));
    let o = claims(&claim("1,0,1"));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("seed 1 appears twice"),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty());
}

/// A certified claim on a share decides on the exact fraction k/n of the count behind it
/// against the bound as written: a share of 3/5 proves `<= 0.6`, `>= 0.6` and `== 0.6`
/// (the outward-rounded interval [0.6 - ulp, 0.6 + ulp] proved none of them: 6/10 against
/// `<= 0.6` failed although the certificate proves exactly 6/10), and `< 0.6` fails.
/// The shares taken are every one of the run whose fraction k/n is not dyadic (a dyadic
/// k/n is an f64, where the old rule was already exact) and has a finite decimal; the
/// test needs at least one.
#[test]
fn certified_shares_are_decided_on_their_exact_fraction() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.toml");
    let config = "config = { d = 20, n_train = 5, n_test = 5, steps = 3 }\n";
    let claim = |name: &str, quantity: &str, op: &str, bound: &str| {
        format!(
            "[[claim]]\nname = \"{name}\"\n{config}certified = true\nsource = \"run\"\nquantity = \"{quantity}\"\nop = \"{op}\"\nbound = {bound}\n\n"
        )
    };
    let shares = [
        ("train_accuracy", "train_correct"),
        ("test_accuracy", "test_correct"),
        ("selection/clean/R", "selection_counts/clean/R"),
        ("selection/clean/I", "selection_counts/clean/I"),
        ("selection/clean/W_same", "selection_counts/clean/W_same"),
    ];
    // the counts and their denominators, read from the certificate
    let probe: String = shares
        .iter()
        .flat_map(|(_, count)| {
            [
                claim(count, &format!("{count}/lo"), ">=", "0"),
                claim(count, &format!("{count}/of"), ">=", "0"),
            ]
        })
        .collect();
    std::fs::write(&path, probe).unwrap();
    let (code, v) = check_json(&path);
    assert_eq!(code, Some(0), "{v}");
    let mut tried = 0;
    for (k, (share, _)) in shares.iter().enumerate() {
        let lo = v[2 * k]["measured"].as_f64().unwrap() as u64;
        let mut of = v[2 * k + 1]["measured"].as_f64().unwrap() as u64;
        let dyadic = of.is_power_of_two() || lo == 0 || lo == of;
        while of.is_multiple_of(2) || of.is_multiple_of(5) {
            of /= if of.is_multiple_of(2) { 2 } else { 5 };
        }
        if dyadic || of != 1 {
            continue; // a dyadic share is an f64; other than 2s and 5s: no finite decimal
        }
        tried += 1;
        // the bound as the decimal the share is, e.g. 0.6 for 3/5
        let bound = format!("{}", lo as f64 / v[2 * k + 1]["measured"].as_f64().unwrap());
        let body = claim("le", share, "<=", &bound)
            + &claim("ge", share, ">=", &bound)
            + &claim("eq", share, "==", &bound);
        std::fs::write(&path, body).unwrap();
        let (code, v) = check_json(&path);
        assert_eq!(code, Some(0), "{share} = {bound}: {v}");
        std::fs::write(&path, claim("lt", share, "<", &bound)).unwrap();
        let (code, v) = check_json(&path);
        assert_eq!(code, Some(1), "{share} = {bound} is not < {bound}: {v}");
    }
    assert!(
        tried > 0,
        "no share of the run is a non-dyadic fraction: {v}"
    );
}

/// Over several seeds the table shows the least and the greatest measured value in
/// scientific notation (it printed `{:.3}`, so every value under 5e-4 read `0.000`), and
/// the JSON holds them as `range`, the extremes of `per_seed`; `measured` is the first
/// seed's value.
#[test]
fn a_multi_seed_claim_shows_its_extremes() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.toml");
    let body = format!(
        "[[claim]]\nname = \"c\"\n{SMALL}seeds = \"0..3\"\nsource = \"run\"\nquantity = \"train_loss\"\nop = \">=\"\nbound = 0\n"
    );
    std::fs::write(&path, body).unwrap();
    let (code, v) = check_json(&path);
    assert_eq!(code, Some(0), "{v}");
    let per_seed: Vec<f64> = v[0]["per_seed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[1].as_f64().unwrap())
        .collect();
    assert_eq!(per_seed.len(), 3, "{v}");
    let lo = per_seed.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = per_seed.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    assert!(lo < hi, "three seeds, one loss: {v}");
    assert_eq!(v[0]["range"], serde_json::json!([lo, hi]), "{v}");
    assert_eq!(v[0]["measured"].as_f64(), Some(per_seed[0]), "{v}");
    let o = tokensel(&["check", path.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!(
            "3/3 seeds hold (needs >= 3/3), min {lo:.4e} max {hi:.4e}"
        )),
        "{out}"
    );
}

/// A `twin` claim trains in MPFR at its `prec` (default 256 bits): its measured value is
/// `tokensel twin --prec P --json`'s, to the bit, at 128 and at 256 bits, and a checkpoint
/// (`step`) is read as a `run` claim reads one, and normalised GD with eps = 0 runs
/// where f64's stops. A `run` claim with `prec` is refused
/// (exit 2, the field named): it would read as MPFR while it trains in f64.
#[test]
fn twin_claims_train_in_mpfr_at_their_precision() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg_path = tmp.path().join("cfg.toml");
    std::fs::write(&cfg_path, "d = 20\nn_train = 4\nn_test = 10\nsteps = 30\n").unwrap();
    let path = tmp.path().join("c.toml");
    for (prec, line) in [("256", ""), ("128", "prec = 128\n")] {
        let body = format!(
            "[[claim]]\nname = \"loss\"\n{SMALL}source = \"twin\"\n{line}quantity = \"train_loss\"\nop = \">\"\nbound = 0\n\n\
             [[claim]]\nname = \"loss at 10\"\n{SMALL}source = \"twin\"\n{line}step = 10\nquantity = \"train_loss\"\nop = \">\"\nbound = 0\n"
        );
        std::fs::write(&path, body).unwrap();
        let (code, v) = check_json(&path);
        assert_eq!(code, Some(0), "{v}");
        let o = tokensel(&[
            "twin",
            "--config",
            cfg_path.to_str().unwrap(),
            "--prec",
            prec,
            "--json",
            "--quiet",
            "--out",
            tmp.path().join(format!("t{prec}")).to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let twin: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(twin["arith"], "mpfr");
        assert_eq!(v[0]["measured"], twin["train_loss"], "{prec} bits: {v}");
        let traj =
            std::fs::read_to_string(tmp.path().join(format!("t{prec}/trajectory.json"))).unwrap();
        let traj: serde_json::Value = serde_json::from_str(&traj).unwrap();
        let at10 = traj["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["step"] == 10)
            .unwrap();
        assert_eq!(v[1]["measured"], at10["train_loss"], "{prec} bits: {v}");
    }
    // normalised GD with eps = 0 and a long step: f64's gradient leaves its range (a typed
    // stop, exit 3, at step 123) where the twin's does not
    let ngd = |source: &str| {
        format!(
            "[[claim]]\nname = \"ngd\"\nconfig = {{ d = 20, n_train = 4, n_test = 10, steps = 1000, step_size = 10.0, optimizer = {{ kind = \"normalized-gd\", eps = 0.0 }} }}\nsource = \"{source}\"\nquantity = \"steps\"\nop = \"==\"\nbound = 1000\n"
        )
    };
    let o = claims(&ngd("twin"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = claims(&ngd("run"));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("normalised GD stopped"),
        "{}",
        stderr(&o)
    );
    let o = claims(&format!(
        "[[claim]]\nname = \"f64\"\n{SMALL}source = \"run\"\nprec = 256\nquantity = \"train_loss\"\nop = \">\"\nbound = 0\n"
    ));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("`prec`"), "{}", stderr(&o));
}

/// claims/max_margin.toml (run by hand: about its wall time, proofs-notes/max-margin.md)
/// passes every check made before the work: its configs build, its quantities name
/// numbers of the twin's summary (the `direction` records), its steps are checkpoints.
#[test]
fn max_margin_claims_parse() {
    use tokensel::prelude::experiments::claims::{ClaimsFile, Source};
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("claims/max_margin.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let (file, configs) = ClaimsFile::parse(&text, &path).unwrap();
    assert_eq!(file.claim.len(), configs.len());
    assert!(file.claim.len() >= 6);
    // the summary's schema is traced (it was not while a config's `[direction] pattern`
    // stopped the tracer: every path was accepted), so a typo is refused before the work
    let summary = tokensel::prelude::experiments::schema::of_source(Source::Twin, false);
    assert!(summary.check("direction/limit/locally_optimal").is_ok());
    assert!(summary.check("direction/limit/off_pattern_count").is_ok());
    assert!(summary.check("direction/last/one_minus_cor").is_err());
    assert!(summary.check("direction/limit/local_optimality").is_err());
    for (c, cfg) in file.claim.iter().zip(&configs) {
        assert_eq!(c.source, Source::Twin, "{}", c.name);
        assert!(cfg.direction.is_some(), "{}", c.name);
        assert_eq!(c.seeds.as_deref(), Some("0..10"), "{}", c.name);
    }
}

#[test]
fn a_compare_claim_on_a_run_that_stops_is_refused_not_read() {
    // exact normalised GD: the f64 run stops at step 694 and `compare` reports only the
    // steps before it; a claim reads no part-run report (exit 3, the stop named)
    let o = claims(
        "[[claim]]\nname = \"c\"\nconfig = { d = 60, n_train = 6, n_test = 20, mu_norm = 6.0, eta = 0.0, step_size = 0.5, steps = 800, method = \"span\", optimizer = { kind = \"normalized-gd\" } }\nsource = \"compare\"\nquantity = \"max_rel_err/loss\"\nop = \"<\"\nbound = 1\n",
    );
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the comparison stopped after step 694"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A claim's record quantity is checked against the optional parts its config records,
/// before any work (the adversary's finding: each ran its claim and failed it as
/// "missing" with exit 1): the prompt's record without the in-sequence prompt, the
/// direction record without `[direction]`, a sample's `outputs` on the binary model or
/// at a class index past K, a sample index past n_train; on the summary, on a
/// checkpoint (`step`) and certified. Exit 2 naming the quantity; a 100,000-step run
/// would not finish within the test's 20 s.
#[test]
fn record_quantities_the_config_does_not_record_are_refused_before_work() {
    let dir = tempfile::tempdir().unwrap();
    let bin = "config = { steps = 100000 }";
    let k3 = r#"config = { model = { kind = "multiclass", classes = 3 }, layout = { tokens = 9, weak_opposite = 2 }, steps = 100000 }"#;
    for (config, extra, quantity, needle) in [
        (bin, "", "prompt/attention/clean", "separate prompt"),
        (bin, "step = 0\n", "prompt/top/noisy", "separate prompt"),
        (bin, "", "direction/last/one_minus_corr", "no [direction]"),
        (
            bin,
            "step = 0\n",
            "direction/one_minus_corr",
            "no [direction]",
        ),
        (bin, "step = 0\n", "samples/0/outputs/0", "binary model"),
        (
            bin,
            "step = 0\n",
            "samples/99/f",
            "training sample index (n_train) 0..19",
        ),
        (
            bin,
            "step = 0\ncertified = true\n",
            "samples/0/outputs/0",
            "binary model",
        ),
        (
            bin,
            "certified = true\n",
            "direction/norm",
            "no [direction]",
        ),
        (
            k3,
            "step = 0\n",
            "samples/0/outputs/5",
            "class index (K) 0..2",
        ),
    ] {
        let o = common::check_one_claim(dir.path(), config, extra, quantity);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{quantity}: {err}");
        assert!(
            err.contains(needle) && err.contains(quantity),
            "{quantity}: {err}"
        );
    }
}

/// A claim's bound outside the range its quantity can take (the record's visit declares
/// each leaf's range: a loss >= 0, an accuracy or attention share in [0, 1], a top
/// token below T; a change from `baseline_step` within the range's width) is refused
/// before any work (exit 2), naming the claim, the quantity, its range and the bound:
/// the run would decide nothing the range does not. A 100,000-step run would not finish
/// within the test's 20 s. Bounds at the range's ends and a baseline change below 0 are
/// taken (the file parses).
#[test]
fn claim_bounds_outside_their_quantitys_range_are_refused_before_work() {
    use tokensel::prelude::experiments::claims::ClaimsFile;
    let dir = tempfile::tempdir().unwrap();
    let claim = |extra: &str, quantity: &str, op: &str, bound: &str| {
        format!(
            "[[claim]]\nname = \"ranged\"\nconfig = {{ steps = 100000 }}\nsource = \"run\"\n\
             {extra}quantity = \"{quantity}\"\nop = \"{op}\"\nbound = {bound}\n"
        )
    };
    for (extra, quantity, op, bound, range) in [
        ("", "train_loss", "<", "-1", ">= 0"),
        ("step = 0\n", "train_loss", ">=", "-0.5", ">= 0"),
        ("", "test_accuracy", ">=", "1.5", "in [0, 1]"),
        ("step = 0\n", "attention/clean/R", ">", "2", "in [0, 1]"),
        ("step = 0\n", "samples/3/top", "==", "25", "in [0, 7]"),
        (
            "certified = true\n",
            "train_accuracy",
            ">=",
            "1.5",
            "in [0, 1]",
        ),
        (
            "step = 100000\nbaseline_step = 0\n",
            "test_accuracy",
            ">",
            "1.5",
            "in [-1, 1]",
        ),
    ] {
        let path = dir.path().join("c.toml");
        std::fs::write(&path, claim(extra, quantity, op, bound)).unwrap();
        let o = common::tokensel_within(
            &["check", path.to_str().unwrap()],
            std::time::Duration::from_secs(20),
        )
        .expect("refused before the 100,000-step run");
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{quantity} {op} {bound}: {err}");
        for word in ["`ranged`", "`bound`", quantity, range, bound] {
            assert!(err.contains(word), "{quantity} {op} {bound}: {word}: {err}");
        }
    }
    // in range: parsed (every check before the work passed)
    for (extra, quantity, op, bound) in [
        ("", "train_loss", ">=", "0"),
        ("", "test_accuracy", "<=", "1"),
        (
            "step = 100000\nbaseline_step = 0\n",
            "test_accuracy",
            ">",
            "-0.5",
        ),
        ("step = 0\n", "samples/3/f", "<", "-1000"),
    ] {
        let path = dir.path().join("ok.toml");
        let text = claim(extra, quantity, op, bound);
        if let Err(e) = ClaimsFile::parse(&text, &path) {
            panic!("{quantity} {op} {bound}: {e}");
        }
    }
}
