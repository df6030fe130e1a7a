//! Scaffolding shared by the integration tests.
#![allow(dead_code)]

pub mod conformance;
pub mod npy;

use std::process::{Command, Output};
use tokensel::prelude::F64;

use tokensel::prelude::{
    Config, Dataset, Layout, Method, Mode, PInit, Params, Trainer, Trajectory, WInit,
};

/// The f64 trainer's whole trajectory of `cfg` (its own data).
pub fn run_f64(cfg: &Config) -> Trajectory {
    let data = Dataset::generate(cfg);
    Trainer::run(cfg, &data, F64, &mut |_| {}).unwrap()
}

/// An f64 direct trainer at step 0 from explicit initial parameters.
pub fn f64_from<'a>(cfg: &'a Config, data: &'a Dataset, params: &Params) -> Trainer<'a, F64> {
    Trainer::from_params(cfg, data, F64, cfg.formulation, Method::Direct, params).unwrap()
}

/// Round a vector of MPFR numbers to f64.
pub fn to_f64(v: &[rug::Float]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// Run the built binary with `args`.
pub fn tokensel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tokensel"))
        .args(args)
        .output()
        .expect("binary runs")
}

/// A command's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The layout with group sizes (R, W_same, W_opposite, I) = `sizes`.
pub fn layout(sizes: [usize; 4]) -> Layout {
    Layout {
        tokens: sizes.iter().sum(),
        relevant: sizes[0],
        weak_same: sizes[1],
        weak_opposite: sizes[2],
        irrelevant: sizes[3],
    }
}

/// `cfg` with a Gaussian p(0) of scale `p_scale` and, unless `mode` is p-mode with
/// `kaiming` false, a Kaiming-uniform W(0): the initialisation the W- and joint modes
/// need (p != 0, dense W).
pub fn with_init(mut cfg: Config, mode: Mode, p_scale: f64, kaiming: bool) -> Config {
    cfg.mode = mode;
    cfg.init.p = PInit::Gaussian;
    cfg.init.p_scale = p_scale;
    if kaiming || mode != Mode::P {
        cfg.init.w = WInit::KaimingUniform;
    }
    cfg
}

/// `cfg` with a `[factorised]` section of `m` rows (`bias`, `train_p`, `init`; the
/// Gaussian init's scale 0.3) in the direct step, validated: `cfg`'s mode must be the
/// one `train_p` needs (W, or joint with `train_p`).
pub fn with_factorised(
    mut cfg: Config,
    m: usize,
    bias: bool,
    train_p: bool,
    init: tokensel::prelude::models::factorised::QkInit,
) -> Config {
    use tokensel::prelude::models::factorised::{QkInit, Section};
    cfg.method = Method::Direct;
    cfg.factorised = Some(Section {
        m,
        bias,
        train_p,
        init,
        scale: (init == QkInit::Gaussian).then_some(0.3),
    });
    cfg.validate().unwrap();
    cfg
}

/// A small config for property tests of whole trajectories: `sizes` the group sizes
/// (one relevant token if all are 0), `mode` 0, 1, 2 for p-, W- and joint mode, a
/// Gaussian p(0) (scale 0.5) when `p0` or in W-mode, a Kaiming W(0) when `kaiming` or
/// outside p-mode, 3 test samples.
#[allow(clippy::too_many_arguments)]
pub fn small_config(
    seed: u64,
    d: usize,
    mut sizes: [usize; 4],
    n_train: usize,
    mu_norm: f64,
    eta: f64,
    alpha: f64,
    steps: u64,
    mode: u8,
    kaiming: bool,
    p0: bool,
) -> Config {
    if sizes.iter().sum::<usize>() == 0 {
        sizes[0] = 1;
    }
    let mode = [Mode::P, Mode::W, Mode::Joint][mode as usize];
    let mut c = Config {
        seed,
        d,
        n_train,
        n_test: 3,
        mu_norm,
        eta,
        step_size: alpha,
        steps,
        mode,
        layout: layout(sizes),
        ..Config::default()
    };
    if p0 || mode == Mode::W {
        c.init.p = PInit::Gaussian;
        c.init.p_scale = 0.5;
    }
    if kaiming || mode != Mode::P {
        c.init.w = WInit::KaimingUniform;
    }
    c
}

/// Run the built binary with `args`, stdin empty; kill it after `limit` (a hang):
/// `None` then, else its output.
pub fn tokensel_within(args: &[&str], limit: std::time::Duration) -> Option<Output> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokensel"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let t0 = std::time::Instant::now();
    let mut pause = std::time::Duration::from_micros(200);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(20));
    };
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    status.map(|status| Output {
        status,
        stdout,
        stderr,
    })
}

/// Every ball of `bs` contains the twin's value at the same index of `ts` (`what` names
/// the quantity and step in the message).
pub fn assert_enclosed(what: &str, bs: &[tokensel::prelude::BallReal], ts: &[rug::Float]) {
    assert_eq!(bs.len(), ts.len(), "{what}");
    for (k, (x, v)) in bs.iter().zip(ts).enumerate() {
        assert!(x.contains(v), "{what}[{k}] = {v} not in {x:?}");
    }
}

/// The files of a supplied `tokensel data` export of `data`'s arrays (its head: the
/// K-class one where there is one), as `cfg` runs them.
pub fn supplied_files(cfg: &Config, data: &Dataset) -> Vec<(String, Vec<u8>)> {
    use tokensel::prelude::Supplied;
    let nu = match &data.nu_classes {
        Some(nu) => nu.clone().into_dyn(),
        None => data.nu.clone().into_dyn(),
    };
    let sup = Dataset::supplied(
        cfg,
        Supplied {
            x_train: data.train.x.clone(),
            y_train: data.train.y.clone(),
            y_true_train: Some(data.train.y_true.clone()),
            x_test: data.test.x.clone(),
            y_test: data.test.y_true.clone(),
            nu,
            groups: Some(data.groups.clone()),
        },
    )
    .unwrap();
    tokensel::prelude::formats::export::files(cfg, &sup).1
}

/// Write `cfg`'s generated arrays to `dir` as a supplied `tokensel data` export (labels
/// final: the config runs with eta = 0, the flipped labels given as observed), and
/// return the config it runs.
pub fn write_supplied(cfg: &Config, dir: &std::path::Path) -> Config {
    let data = Dataset::generate(cfg);
    let cfg0 = Config {
        eta: 0.0,
        ..cfg.clone()
    };
    std::fs::create_dir_all(dir).unwrap();
    for (name, bytes) in supplied_files(&cfg0, &data) {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    cfg0
}

/// `twin` at 64 bits on the config `cfg` with the state file `state`, saved every 2
/// steps, `extra` flags appended (it must end within 20 s: the state tests' runs are
/// small).
pub fn twin_with_state(cfg: &std::path::Path, state: &std::path::Path, extra: &[&str]) -> Output {
    let (cfg, state) = (cfg.to_str().unwrap(), state.to_str().unwrap());
    let mut args = vec![
        "twin",
        "--quiet",
        "--prec",
        "64",
        "--config",
        cfg,
        "--state",
        state,
        "--save-every",
        "2",
    ];
    args.extend(extra);
    tokensel_within(&args, std::time::Duration::from_secs(20)).expect("no hang")
}

/// `tokensel check` of a one-claim file: the claim `x` on `config` (a `config = {...}`
/// line) from the run, `extra` lines, `quantity >= 0.5`; the claims name 100,000-step
/// runs, so the check must be refused before any work (within 20 s).
pub fn check_one_claim(dir: &std::path::Path, config: &str, extra: &str, quantity: &str) -> Output {
    let text = format!(
        "[[claim]]\nname = \"x\"\n{config}\nsource = \"run\"\n{extra}quantity = \"{quantity}\"\nop = \">=\"\nbound = 0.5\n"
    );
    let path = dir.join("c.toml");
    std::fs::write(&path, text).unwrap();
    tokensel_within(
        &["check", path.to_str().unwrap()],
        std::time::Duration::from_secs(20),
    )
    .expect("refused before the 100,000-step run")
}

/// `run --config CFG --out DIR --quiet` of the config text `config`, written as
/// `DIR.toml` beside DIR under `dir`: the run's `trajectory.json` (the run must succeed).
pub fn run_out(dir: &std::path::Path, name: &str, config: &str) -> std::path::PathBuf {
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(&cfg, config).unwrap();
    let out = dir.join(name);
    let o = tokensel(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    out.join("trajectory.json")
}

/// Richardson's extrapolation of central differences of `f` (the 512-bit twin) at
/// `theta` along coordinate `j` (tests/ops.rs, tests/real_setting.rs): D(h) =
/// (f(theta + h e_j) - f(theta - h e_j)) / 2h, R = (4 D(h/2) - D(h)) / 3, whose error is
/// h^4 f^(5) / 480 plus the rounding error 2^-512 |f| / h.
pub fn richardson(
    f: &dyn Fn(&[rug::Float]) -> rug::Float,
    theta: &[rug::Float],
    j: usize,
    h: &rug::Float,
) -> rug::Float {
    let d = |h: &rug::Float| {
        let mut plus = theta.to_vec();
        let mut minus = theta.to_vec();
        plus[j] += h;
        minus[j] -= h;
        (f(&plus) - f(&minus)) / rug::Float::with_val(512, h * 2u32)
    };
    let half = rug::Float::with_val(512, h / 2u32);
    (d(&half) * 4u32 - d(h)) / 3u32
}
