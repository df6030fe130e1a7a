//! `tokensel certify`: the ball trainer's enclosure of the exact run, as a certificate.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use super::{ConfigArgs, EXIT_FAILED, EXIT_OK, finish, print_report, progress_bar};
use crate::analysis::certify::{self, Certificate, Options, Prec};
use crate::config::Method;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::io::files::check_output_dir;

#[derive(Args, Debug)]
pub(super) struct CertifyArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Working precision of the balls in bits, or `auto`: 128, 256, 512, 1024 in turn
    /// until the final checkpoint decides everything.
    #[arg(long, value_name = "BITS|auto", default_value = "128", value_parser = parse_prec)]
    prec: Prec,
    /// Print exactly one JSON object (the certificate) on stdout.
    #[arg(long)]
    json: bool,
    /// Write certificate.json and certificate.txt (the readable summary) into DIR, as
    /// one set (certificate.json last: the set's commit mark).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// `BITS` or `auto`.
fn parse_prec(s: &str) -> std::result::Result<Prec, String> {
    if s == "auto" {
        return Ok(Prec::Auto);
    }
    s.parse::<u32>()
        .map(Prec::Bits)
        .map_err(|_| format!("`{s}` is not a number of bits or `auto`"))
}

pub(super) fn certify(args: &CertifyArgs) -> Result<i32> {
    let cfg = args.config.load()?;
    let opts = Options {
        prec: args.prec,
        // the span step unless --method says otherwise (the config's own `method` is the
        // f64 trainer's: auto)
        method: args.config.method.unwrap_or(Method::Span),
    };
    opts.check(&cfg)?;
    if let Some(dir) = &args.out {
        check_output_dir(dir)?;
    }
    if let Some(w) = opts.warning(&cfg) {
        eprintln!("warning: {w}");
    }
    let t0 = Instant::now();
    let data = Dataset::generate(&cfg);
    let bar = progress_bar(cfg.steps, args.quiet, "steps");
    let mut current = 0;
    let cert = certify::certify(&cfg, &data, &opts, &mut |prec, step| {
        if prec != current {
            current = prec;
            bar.reset();
            if opts.prec == Prec::Auto {
                bar.println(format!("certifying at {prec} bits"));
            }
        }
        bar.set_position(step);
    })?;
    bar.finish_and_clear();
    if let Some(dir) = &args.out {
        publish(dir, &cert)?;
    }
    print_report(&cert, args.json);
    if !args.json
        && let Some(dir) = &args.out
    {
        println!(
            "certificate written to {}",
            dir.join("certificate.json").display()
        );
    }
    finish(t0, Some(cfg.steps));
    Ok(if cert.decided { EXIT_OK } else { EXIT_FAILED })
}

/// Write the certificate set into `dir`: certificate.txt, then certificate.json (the
/// commit mark), each written and synced under a temporary name first and renamed into
/// place; the old certificate.json is removed before the renames, so where
/// certificate.json exists the summary beside it is from the same run. (The one place
/// that writes the set.)
fn publish(dir: &Path, cert: &Certificate) -> Result<()> {
    use crate::io::files::{remove_stale_temps, write_temp};
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let (json, txt) = (dir.join("certificate.json"), dir.join("certificate.txt"));
    remove_stale_temps(&json);
    remove_stale_temps(&txt);
    let text = serde_json::to_string_pretty(cert).expect("certificates serialise");
    let json_tmp = write_temp(&json, text.as_bytes())?;
    let txt_tmp = write_temp(&txt, cert.to_string().as_bytes())?;
    match std::fs::remove_file(&json) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&json)(e)),
        _ => {}
    }
    std::fs::rename(&txt_tmp, &txt).map_err(io(&txt))?;
    std::fs::rename(&json_tmp, &json).map_err(io(&json))
}
