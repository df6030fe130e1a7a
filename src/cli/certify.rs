//! `tokensel certify`: the ball trainer's enclosure of the exact run, as a certificate.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::{ConfigArgs, EXIT_FAILED, EXIT_OK, EXIT_STOPPED, finish, print_report, progress_bar};
use crate::analysis::certify::{self, Certificate, Options, Prec};
use crate::config::Method;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::io::publish::{OutputDir, SetKind};

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
    let out = args
        .out
        .as_deref()
        .map(|dir| OutputDir::prepare(dir, SetKind::Certificate))
        .transpose()?;
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
    // printed whether or not it could be written: the result is not lost
    let published = out.as_ref().map(|out| publish(out, &cert));
    print_report(&cert, args.json);
    if !args.json
        && let (Some(dir), Some(Ok(()))) = (&args.out, &published)
    {
        println!(
            "certificate written to {}",
            dir.join("certificate.json").display()
        );
    }
    // a run that blew up did not do every step: no per-step average
    finish(t0, cert.stopped().is_none().then_some(cfg.steps));
    if let Some(Err(e)) = published {
        return Err(Error::NotPublished {
            source: Box::new(e),
        });
    }
    Ok(match (cert.stopped(), cert.decided) {
        (Some(_), _) => EXIT_STOPPED,
        (None, true) => EXIT_OK,
        (None, false) => EXIT_FAILED,
    })
}

/// Publish the certificate set (certificate.json, certificate.txt) into `out` as one
/// set (`io::publish`): a reader sees the old certificate or the new one, never a mix.
fn publish(out: &OutputDir, cert: &Certificate) -> Result<()> {
    let text = serde_json::to_string_pretty(cert).expect("certificates serialise");
    out.publish(&[
        ("certificate.json".to_string(), text.into_bytes()),
        ("certificate.txt".to_string(), cert.to_string().into_bytes()),
    ])
}
