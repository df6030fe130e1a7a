//! What `tokensel svm` prints (readable text) and serialises (JSON): the report of a
//! solved instance, its exact rationals and decimals.

use std::fmt;

use rug::{Integer, Rational};
use serde::Serialize;

use super::exact::IsZero;
use super::{
    ExactSize, F64Outcome, Failure, PatternChoice, Solved, Verdict, check_sizes, pattern, solve,
    stop_description,
};
use crate::config::Group;
use crate::data::Dataset;
use crate::error::Result;
use crate::model::caps::{Capability, require};

/// The attention SVM of `cfg`'s binary model on `data` for the pattern `choice`: sizes
/// refused before any work ([`check_sizes`]), W = W(0) of the config (the identity map
/// whether or not it is stored), the f64 solve, the exact proof, and the report
/// `tokensel svm` prints.
pub fn report(
    cfg: &crate::config::Config,
    data: &Dataset,
    choice: &PatternChoice,
) -> Result<Report> {
    require(cfg, "svm", &[Capability::Svm])?;
    let d = cfg.d;
    let dense = cfg.init.w == crate::config::WInit::KaimingUniform;
    check_sizes(cfg.n_train, cfg.layout.tokens, d, dense)?;
    let w = w0_map(cfg);
    let pattern = pattern(data, choice)?;
    let x = data.train.x.as_slice().expect("standard layout");
    let solved = solve(x, cfg.layout.tokens, d, w.as_deref(), pattern)?;
    Ok(Report::new(data, choice, d, w.is_some(), &solved))
}

/// W(0) of `cfg` (row-major) as the SVM's map, or `None` where it is the identity
/// (whether or not the config stores it: W- and joint mode store W(0) = I).
pub fn w0_map(cfg: &crate::config::Config) -> Option<Vec<f64>> {
    let init = crate::data::Params::init(cfg);
    init.w
        .filter(|w| {
            !w.indexed_iter()
                .all(|((i, j), v)| *v == if i == j { 1.0 } else { 0.0 })
        })
        .map(|w| w.iter().copied().collect())
}

/// `q` as a decimal rounded toward zero to `sig` significant digits.
pub fn decimal_down(q: &Rational, sig: u32) -> String {
    if *q <= 0 {
        return if *q == 0 {
            "0".into()
        } else {
            // toward zero: the magnitude rounded down
            format!("-{}", decimal_down(&Rational::from(-q), sig))
        };
    }
    // e: the decimal exponent with 10^e <= q < 10^(e+1)
    let mut e = q.to_f64().log10().floor() as i64;
    let pow = |k: i64| -> Rational {
        let p = Integer::from(Integer::u_pow_u(10, k.unsigned_abs() as u32));
        if k >= 0 {
            Rational::from(p)
        } else {
            Rational::from((Integer::from(1), p))
        }
    };
    while pow(e) > *q {
        e -= 1;
    }
    while pow(e + 1) <= *q {
        e += 1;
    }
    let k = sig as i64 - 1 - e; // digits after the point
    let scaled: Rational = q * pow(k);
    let digits = scaled.floor().numer().to_string();
    place_point(&digits, k)
}

/// `digits` * 10^-k as decimal text.
fn place_point(digits: &str, k: i64) -> String {
    if k <= 0 {
        return format!("{digits}{}", "0".repeat((-k) as usize));
    }
    let k = k as usize;
    let padded = if digits.len() <= k {
        format!("{}{digits}", "0".repeat(k + 1 - digits.len()))
    } else {
        digits.to_string()
    };
    let (int, frac) = padded.split_at(padded.len() - k);
    format!("{int}.{frac}")
}

/// An exact rational as JSON: numerator and denominator as decimal strings.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ExactRational {
    /// Numerator.
    pub num: String,
    /// Denominator (> 0).
    pub den: String,
}

impl From<&Rational> for ExactRational {
    fn from(q: &Rational) -> Self {
        ExactRational {
            num: q.numer().to_string(),
            den: q.denom().to_string(),
        }
    }
}

/// The selected tokens' groups among clean and noisy samples.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GroupCount {
    /// Group name (R, W_same, W_opposite, I).
    pub group: &'static str,
    /// Clean samples whose selected token is in it.
    pub clean: usize,
    /// Noisy samples whose selected token is in it.
    pub noisy: usize,
}

/// One constraint of a certificate: sample, token and its exact coefficient.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Entry {
    /// Sample.
    pub sample: usize,
    /// Token (not the selected one).
    pub token: usize,
    /// The coefficient (an integer, or a multiplier's exact rational).
    pub value: ExactRational,
}

/// What `tokensel svm` prints (readable or JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// "svm".
    pub command: &'static str,
    /// optimal, theorem or given.
    pub pattern: &'static str,
    /// The selected token of each sample.
    pub selected: Vec<usize>,
    /// Training samples n.
    pub samples: usize,
    /// Tokens per sample T.
    pub tokens: usize,
    /// Dimension d.
    pub d: usize,
    /// "identity" or "dense W(0)".
    pub w: &'static str,
    /// Constraints n (T - 1).
    pub constraints: usize,
    /// The pattern by group, clean and noisy.
    pub groups: Vec<GroupCount>,
    /// The f64 stage: "optimal", "infeasible", "no convergence" (its iteration limit) or
    /// "factorisation failed" (a Cholesky refactorisation of its free set failed; the
    /// reason names the iteration and the dependent constraint).
    pub f64_outcome: &'static str,
    /// Its iterations.
    pub f64_iterations: usize,
    /// How it stopped where it ended neither optimal nor infeasible (the iteration
    /// limit, or the refactorisation that failed: [`stop_description`]).
    pub f64_stop: Option<String>,
    /// Its support size (optimal), or the size of its free set when it stopped
    /// (infeasible: the constraints the Farkas vector is sought on).
    pub f64_support: usize,
    /// Its ||p||^2 = sum of multipliers (f64), where it ended optimal.
    pub f64_norm2: Option<f64>,
    /// Lower estimate of cond(Q_SS) (squared ratio of the Cholesky factor's diagonal).
    pub f64_condition_estimate: f64,
    /// The exact re-solve's size.
    pub exact: Option<ExactSize>,
    /// "proved optimal", "infeasible (proved)" (an exact Farkas vector), "not proved" (a
    /// failed exact check) or "feasibility undecided" (the f64 stage ended neither
    /// optimal nor with a Farkas vector that passed the exact check).
    pub verdict: &'static str,
    /// The failed check or the missing certificate's reason (not proved).
    pub reason: Option<String>,
    /// The failed check, as data.
    pub failure: Option<Failure>,
    /// ||p_mm||^2 exactly (proved optimal).
    pub norm2: Option<ExactRational>,
    /// ||p_mm||^2 rounded down to 15 significant digits.
    pub norm2_decimal_down: Option<String>,
    /// ||p_mm|| = the f64 square root of ||p_mm||^2 rounded to nearest (not exact).
    pub norm_approx: Option<f64>,
    /// The minimum margin min_c p_mm^T v_c, exactly 1 when proved.
    pub min_margin: Option<ExactRational>,
    /// Constraints at margin exactly 1.
    pub tight: Option<usize>,
    /// Constraints with a positive exact multiplier.
    pub support: Option<usize>,
    /// |f64 ||p||^2 - exact| / exact.
    pub f64_relative_error: Option<f64>,
    /// The support's multipliers l_c exactly (proved optimal).
    pub multipliers: Vec<Entry>,
    /// The Farkas vector's nonzero entries (proved infeasible).
    pub farkas: Vec<Entry>,
}

impl Report {
    /// The report of `solved` on `data` with pattern `choice`.
    pub fn new(
        data: &Dataset,
        choice: &PatternChoice,
        d: usize,
        dense_w: bool,
        solved: &Solved,
    ) -> Report {
        let cons = &solved.constraints;
        let groups = Group::ALL
            .iter()
            .map(|&grp| {
                let count = |noisy: bool| {
                    cons.pattern
                        .iter()
                        .enumerate()
                        .filter(|(i, a)| {
                            data.train.is_noisy(*i) == noisy && data.groups[**a] == grp
                        })
                        .count()
                };
                GroupCount {
                    group: grp.name(),
                    clean: count(false),
                    noisy: count(true),
                }
            })
            .collect();
        let f64_norm2 = match &solved.f64.outcome {
            F64Outcome::Optimal { lambda } => Some(lambda.iter().sum()),
            _ => None,
        };
        let entry = |c: usize, value: ExactRational| {
            let (sample, token) = cons.sample_token(c);
            Entry {
                sample,
                token,
                value,
            }
        };
        let mut r = Report {
            command: "svm",
            pattern: choice.name(),
            selected: cons.pattern.clone(),
            samples: cons.pattern.len(),
            tokens: cons.t,
            d,
            w: if dense_w { "dense W(0)" } else { "identity" },
            constraints: cons.count(),
            groups,
            f64_outcome: match solved.f64.outcome {
                F64Outcome::Optimal { .. } => "optimal",
                F64Outcome::Infeasible { .. } => "infeasible",
                F64Outcome::NoConvergence => "no convergence",
                F64Outcome::FactorisationFailed { .. } => "factorisation failed",
                F64Outcome::SupportOverLimit => "support over the limit",
            },
            f64_iterations: solved.f64.iterations,
            f64_stop: stop_description(&solved.f64.outcome, cons),
            f64_support: solved.support.len(),
            f64_norm2,
            f64_condition_estimate: solved.f64.condition,
            exact: solved.exact,
            verdict: "not proved",
            reason: None,
            failure: None,
            norm2: None,
            norm2_decimal_down: None,
            norm_approx: None,
            min_margin: None,
            tight: None,
            support: None,
            f64_relative_error: None,
            multipliers: Vec::new(),
            farkas: Vec::new(),
        };
        match &solved.verdict {
            Verdict::ProvedOptimal {
                proved,
                certificate,
            } => {
                r.verdict = "proved optimal";
                r.norm2 = Some((&proved.norm2).into());
                r.norm2_decimal_down = Some(decimal_down(&proved.norm2, 15));
                r.norm_approx = Some(proved.norm2.to_f64().sqrt());
                r.min_margin = Some((&Rational::from(1)).into());
                r.tight = Some(proved.tight);
                r.support = Some(proved.support);
                r.f64_relative_error = f64_norm2.map(|v| {
                    let diff = Rational::from_f64(v).expect("finite") - &proved.norm2;
                    (diff / &proved.norm2).abs().to_f64()
                });
                r.multipliers = (0..cons.count())
                    .filter(|c| certificate.lambda[*c] > 0)
                    .map(|c| {
                        let q = Rational::from((
                            certificate.lambda[c].clone(),
                            certificate.den.clone(),
                        ));
                        entry(c, (&q).into())
                    })
                    .collect();
            }
            Verdict::NotProved { failure } => {
                r.reason = Some(failure.to_string());
                r.failure = Some(failure.clone());
            }
            Verdict::NoCertificate { reason } => {
                r.reason = Some(reason.clone());
                // the f64 stage found neither an optimum nor a checked infeasibility
                if !matches!(solved.f64.outcome, F64Outcome::Optimal { .. }) {
                    r.verdict = "feasibility undecided";
                }
            }
            Verdict::Infeasible { farkas } => {
                r.verdict = "infeasible (proved)";
                r.farkas = (0..cons.count())
                    .filter(|c| !farkas[*c].is_zero_int())
                    .map(|c| entry(c, (&Rational::from(farkas[c].clone())).into()))
                    .collect();
            }
        }
        r
    }

    /// True for "proved optimal".
    pub fn proved(&self) -> bool {
        self.verdict == "proved optimal"
    }

    /// True where the question is answered with a proof: "proved optimal" or
    /// "infeasible (proved)" (exit code 0; "not proved" and "feasibility undecided" exit
    /// with 1).
    pub fn decided(&self) -> bool {
        self.proved() || self.verdict == "infeasible (proved)"
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "attention SVM, {} pattern: n = {} samples, T = {} tokens, d = {}, W = {}, {} constraints",
            self.pattern, self.samples, self.tokens, self.d, self.w, self.constraints
        )?;
        writeln!(f, "selected tokens by group (clean / noisy samples):")?;
        for g in &self.groups {
            writeln!(f, "  {:<10} {:>5} / {}", g.group, g.clean, g.noisy)?;
        }
        let set = match self.f64_outcome {
            "optimal" => "support constraints",
            _ => "constraints in the free set",
        };
        write!(
            f,
            "f64 active set: {} after {} iterations, {} {set}",
            self.f64_outcome, self.f64_iterations, self.f64_support
        )?;
        if let Some(v) = self.f64_norm2 {
            write!(f, ", ||p||^2 = {v:e}")?;
        }
        writeln!(
            f,
            ", cond(Q_SS) >= {:.3e} (estimate)",
            self.f64_condition_estimate
        )?;
        if let Some(stop) = &self.f64_stop {
            writeln!(f, "  {stop}")?;
        }
        if let Some(e) = &self.exact {
            writeln!(
                f,
                "exact re-solve: {} constraints, entries of up to {} bits, minors of at most {} bits",
                e.support, e.entry_bits, e.minor_bits
            )?;
        }
        writeln!(f, "verdict: {}", self.verdict)?;
        if let Some(reason) = &self.reason {
            writeln!(f, "  failed: {reason}")?;
        }
        if let (Some(n2), Some(norm), Some(tight), Some(support)) = (
            &self.norm2_decimal_down,
            self.norm_approx,
            self.tight,
            self.support,
        ) {
            writeln!(
                f,
                "  ||p_mm||^2 = {n2}... (exact rational in --json; digits rounded down)"
            )?;
            writeln!(f, "  ||p_mm||   = {norm:.12e} (f64 square root, rounded)")?;
            writeln!(
                f,
                "  min margin = 1 exactly: {tight} constraints at margin 1, {support} with a positive multiplier; \
                 all {} constraints >= 1",
                self.constraints
            )?;
        }
        if let Some(e) = self.f64_relative_error {
            writeln!(f, "  f64 ||p||^2 relative error: {e:.3e}")?;
        }
        if !self.farkas.is_empty() {
            writeln!(
                f,
                "  Farkas certificate on {} constraints: y >= 0, sum y_c v_c = 0, sum y_c > 0 (exact)",
                self.farkas.len()
            )?;
            for e in self.farkas.iter().take(10) {
                writeln!(
                    f,
                    "    sample {} token {}: y = {}",
                    e.sample, e.token, e.value.num
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decimal text rounded toward zero, at both ends of the point.
    #[test]
    fn decimals_round_toward_zero() {
        let q = |n: i64, d: i64| Rational::from((n, d));
        assert_eq!(decimal_down(&q(2, 3), 5), "0.66666");
        assert_eq!(decimal_down(&q(-2, 3), 5), "-0.66666");
        assert_eq!(decimal_down(&q(5, 1), 3), "5.00");
        assert_eq!(decimal_down(&q(123_456, 1), 3), "123000");
        assert_eq!(decimal_down(&q(1, 1000), 2), "0.0010");
        assert_eq!(decimal_down(&q(0, 1), 2), "0");
    }
}
