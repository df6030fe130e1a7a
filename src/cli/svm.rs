//! `tokensel svm`: the attention SVM of a selection pattern, solved in f64 and proved
//! optimal exactly (`model::token_selection::svm`).

use std::path::PathBuf;

use clap::Args;

use super::{
    ConfigArgs, DataDir, EXIT_FAILED, EXIT_OK, check_report_file, print_report,
    report_file_written, write_report_file,
};
use crate::config::WInit;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::model::caps::{Capability, require};
use crate::model::token_selection::svm::{self, PatternChoice};

#[derive(Args, Debug)]
pub(super) struct SvmArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// The data of a `tokensel data` directory (generated or supplied), as for `run`:
    /// the SVM is solved on its training tokens, W(0) from its config.
    #[command(flatten)]
    data: DataDir,
    /// The selection pattern: optimal (alpha_i = argmax_t Y_i nu^T x_it, proved by
    /// balls; ties refused), theorem (clean samples their R token, noisy samples their
    /// W_{-Y*} token), or a JSON file with one token index per training sample.
    #[arg(long, value_name = "optimal|theorem|FILE", default_value = "optimal")]
    pattern: String,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// No progress output: `svm` has none; accepted as `run`, `twin` and the other
    /// computing commands accept it.
    #[arg(long)]
    quiet: bool,
    /// Also write the JSON report to FILE (atomically).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Most bytes of a pattern file (a JSON list of MAX_TOKENS indices fits easily).
const MAX_PATTERN_BYTES: u64 = 1 << 20;

fn choice(s: &str) -> Result<PatternChoice> {
    Ok(match s {
        "optimal" => PatternChoice::Optimal,
        "theorem" => PatternChoice::Theorem,
        file => {
            let path = PathBuf::from(file);
            let text = crate::io::files::read_text(&path, MAX_PATTERN_BYTES)?;
            let list: Vec<usize> = serde_json::from_str(&text).map_err(|e| Error::Parse {
                what: "pattern (a JSON list of token indices)",
                path,
                message: e.to_string(),
            })?;
            PatternChoice::Given(list)
        }
    })
}

pub(super) fn svm_cmd(args: &SvmArgs) -> Result<i32> {
    // `--quiet`: svm prints no progress, so there is nothing to hide
    let _ = args.quiet;
    let (cfg, data) = args.data.load(&args.config)?;
    require(&cfg, "svm", &[Capability::Svm])?;
    check_report_file(
        args.out.as_deref(),
        "svm",
        &["command", "pattern", "selected"],
    )?;
    let choice = choice(&args.pattern)?;
    let dense = cfg.init.w == WInit::KaimingUniform;
    svm::check_sizes(cfg.n_train, cfg.layout.tokens, cfg.d, dense)?;
    let data = data.unwrap_or_else(|| Dataset::generate(&cfg));
    // a pattern that does not fit the data is the flag's error, or its file's
    let report = svm::report(&cfg, &data, &choice).map_err(|e| match e {
        Error::InvalidArgument { name, reason } if name == "pattern" => match &choice {
            PatternChoice::Given(_) => Error::Parse {
                what: "pattern (a JSON list of token indices)",
                path: PathBuf::from(&args.pattern),
                message: reason,
            },
            _ => Error::argument("--pattern", reason),
        },
        e => e,
    })?;
    // printed whether or not it could be written (a full disk, a file size limit): the
    // proved result is not lost, and the failed write is exit code 3 (`NotPublished`)
    let written = write_report_file(args.out.as_deref(), &report);
    print_report(&report, args.json);
    report_file_written(written)?;
    // a proof either way (optimal, or infeasible by a Farkas vector) is an answer
    Ok(if report.decided() {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}
