//! A trainer's resumable state: built from the engine's exact parameters (the direct
//! engine's: one loop over the query map's blocks, each as `<prefix><block>`, and
//! Adam's state where the run has one as `<prefix>adam.t`, `<prefix>adam.m.<block>`,
//! `<prefix>adam.v.<block>` per trained block; the prefix is the map's
//! [`QueryMap::state_prefix`]: none for the linear map, so `p`, `W`, `adam.m.p`, ... as
//! ever, `factorised.` for the factorised map; the span engine's `a` and `M`), the step
//! and what the recorder holds; restored
//! bit for bit (the file format is `io::state`'s). A minibatch run's order needs no
//! state: step k's batch is a function of the seed, n, the batch size and k
//! (`train::batch`), drawn again on resume.

use std::collections::BTreeMap;

use crate::arith::{Arith, ArithVisitor, Choice, Kind};
use crate::config::{Config, Method};
use crate::error::Result;
use crate::io::state::{STATE_FORMAT, State};
use crate::model::Model;
use crate::model::query::{Query, QueryMap};

use super::record::Recorder;
use super::{Engine, Trainer};

/// The names of the `values` a state of `cfg`'s run in the engine of `method` holds
/// (the direct engine's blocks with the map's prefix and, for Adam, `adam.t` and the
/// trained blocks' moments; the span engine's `a` and `M`), in the order
/// [`Trainer::state`] writes them; the second of each pair says whether it is a count
/// (`adam.t`) rather than numbers.
pub fn state_names(cfg: &Config, method: Method) -> Vec<(String, bool)> {
    if method == Method::Span && cfg.factorised.is_none() {
        return vec![("a".into(), false), ("M".into(), false)];
    }
    let pre = Query::<f64>::state_prefix_of(cfg);
    let decl = Query::<f64>::declare(cfg);
    let mut names: Vec<(String, bool)> = decl
        .iter()
        .map(|b| (format!("{pre}{}", b.name), false))
        .collect();
    if cfg.optimizer.is_adam() {
        names.push((format!("{pre}adam.t"), true));
        for b in decl.iter().filter(|b| b.trained) {
            names.push((format!("{pre}adam.m.{}", b.name), false));
            names.push((format!("{pre}adam.v.{}", b.name), false));
        }
    }
    names
}

/// The `values` of a state read, against the run it says it was saved from (its own
/// config and trainer), before any work: every key one its engine reads ([`state_names`];
/// an unknown key is refused by name, as a tampered or foreign state), and every
/// parameter and Adam moment entry a finite number in the state's arithmetic (a NaN or
/// an infinity refused naming the key and the entry: no run saves one, and resuming it
/// would stop the run only at its first step). Exit code 2 ([`crate::error::Error::Parse`]).
pub fn check_values(st: &State) -> Result<()> {
    let names = state_names(&st.config, st.trainer.method);
    if let Some(key) = st
        .values
        .keys()
        .find(|k| !names.iter().any(|(n, _)| n == *k))
    {
        let known: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
        return Err(st.error(format!(
            "unknown key `{key}` in `values`: a state of this run holds {} only",
            known.join(", ")
        )));
    }
    let prec = st.trainer.prec_bits;
    let choice = match st.trainer.kind {
        Kind::F64 => Choice::F64,
        Kind::F32 => Choice::F32,
        Kind::Predictor => Choice::Predictor,
        Kind::Mpfr => Choice::mpfr(prec)?,
        Kind::Ball => Choice::ball(prec)?,
    };
    choice.with(Finite { st, names: &names })
}

/// [`check_values`]' parse of every numeric entry in the state's arithmetic.
struct Finite<'a> {
    st: &'a State,
    names: &'a [(String, bool)],
}

impl ArithVisitor for Finite<'_> {
    type Output = ();
    fn visit<A: Arith>(self, ar: A) -> Result<()> {
        let st = self.st;
        for (name, _) in self.names.iter().filter(|(_, count)| !count) {
            let Some(values) = st.values.get(name) else {
                continue; // missing: refused by name when restored
            };
            for (k, s) in values.iter().enumerate() {
                let x = ar
                    .parse_exact(s)
                    .ok_or_else(|| st.error(format!("bad `{name}` value `{s}`")))?;
                if !ar.is_finite(&x) {
                    // a finite number as written (no inf or NaN spelled) that reads as
                    // non-finite is past the exponent range of an MPFR number (the twin's,
                    // a ball's midpoint): said as written, not as the inf it reads as
                    let spelled = s.to_ascii_lowercase();
                    let literal = spelled.contains("inf") || spelled.contains("nan");
                    let kind = st.trainer.kind;
                    let what = match !literal && matches!(kind, Kind::Mpfr | Kind::Ball) {
                        true => format!(
                            "`{s}` (base 16), past the exponent range of the state's {} \
                             arithmetic (it reads as {})",
                            kind.name(),
                            ar.to_f64(&x)
                        ),
                        false => format!("{}", ar.to_f64(&x)),
                    };
                    return Err(st.error(format!(
                        "`{name}` entry {k} is {what}: a state's parameters and Adam moments \
                         are finite numbers (a tampered or corrupt state)"
                    )));
                }
            }
        }
        Ok(())
    }
}

impl<A: Arith, M: Model> Trainer<'_, A, M> {
    /// The resumable state after the last update: step, the engine's parameters (exact
    /// text), and the recorder's Definition 4.1 sums and checkpoints so far.
    pub fn state(&self, rec: &Recorder) -> State {
        let ar = &self.ar;
        let text = |v: &[A::Real]| v.iter().map(|x| ar.to_exact_string(x)).collect::<Vec<_>>();
        let mut values = BTreeMap::new();
        match &self.engine {
            Engine::Direct(e) => {
                let pre = e.map.state_prefix();
                for (b, v) in e.map.blocks().iter() {
                    values.insert(format!("{pre}{}", b.name), text(v));
                }
                if let Some(st) = &e.adam {
                    values.insert(format!("{pre}adam.t"), vec![st.t.to_string()]);
                    for (b, mom) in e.map.blocks().decl.iter().zip(&st.moments) {
                        if let Some(mom) = mom {
                            values.insert(format!("{pre}adam.m.{}", b.name), text(&mom.m));
                            values.insert(format!("{pre}adam.v.{}", b.name), text(&mom.v));
                        }
                    }
                }
            }
            Engine::Span(e) => {
                values.insert("a".to_string(), text(&e.a));
                values.insert("M".to_string(), text(&e.m));
            }
        }
        State {
            format: STATE_FORMAT.to_string(),
            config: self.cfg.clone(),
            trainer: self.info(),
            step: self.step,
            values,
            cumulative: rec.cumulative,
            checkpoints: rec.checkpoints.clone(),
            source: None,
        }
    }

    /// Restore the engine's parameters and the step from a state, after checking that it
    /// belongs to this run (config, arithmetic, formulation, method) and that its values
    /// are sound ([`check_values`]: no unknown key, every entry finite); returns the
    /// recorder that continues it.
    pub fn restore(&mut self, st: &State) -> Result<Recorder> {
        st.check(self.cfg, &self.info())?;
        check_values(st)?;
        let ar = self.ar;
        let read = |name: &str, into: &mut Vec<A::Real>| -> Result<()> {
            let v = st.values(name)?;
            if v.len() != into.len() {
                return Err(st.error(format!(
                    "`{name}` has {} entries, this run needs {}",
                    v.len(),
                    into.len()
                )));
            }
            for (x, s) in into.iter_mut().zip(v) {
                *x = ar
                    .parse_exact(s)
                    .ok_or_else(|| st.error(format!("bad `{name}` value `{s}`")))?;
            }
            Ok(())
        };
        let read_t = |name: &str| -> Result<u64> {
            let t = match st.values(name)? {
                [t] => t
                    .parse()
                    .map_err(|_| st.error(format!("bad `{name}` value `{t}`")))?,
                _ => return Err(st.error(format!("`{name}` must hold one step count"))),
            };
            if t != st.step {
                return Err(st.error(format!(
                    "`{name}` = {t} is not the state's step {}",
                    st.step
                )));
            }
            Ok(t)
        };
        match &mut self.engine {
            Engine::Direct(e) => {
                let pre = e.map.state_prefix();
                for (b, v) in e.map.blocks_mut().iter_mut() {
                    read(&format!("{pre}{}", b.name), v)?;
                }
                if let Some(adam) = &mut e.adam {
                    adam.t = read_t(&format!("{pre}adam.t"))?;
                    let decl = &e.map.blocks().decl;
                    for (b, mom) in decl.iter().zip(&mut adam.moments) {
                        if let Some(mom) = mom {
                            let m_name = format!("{pre}adam.m.{}", b.name);
                            read(&m_name, &mut mom.m)?;
                            let name = format!("{pre}adam.v.{}", b.name);
                            read(&name, &mut mom.v)?;
                            // a structural-zero gradient (b_K's) leaves both moments
                            // exactly 0 in every run: another value is not a run's
                            if b.zero_grad {
                                for (key, v) in [(&m_name, &mom.m), (&name, &mom.v)] {
                                    if let Some(k) = v.iter().position(|x| ar.sign(x) != 0) {
                                        return Err(st.error(format!(
                                            "`{key}` entry {k} is {} (base 16), not 0: \
                                             {}'s gradient is the structural zero, so its \
                                             Adam moments are exactly 0",
                                            ar.to_exact_string(&v[k]),
                                            b.name
                                        )));
                                    }
                                }
                            }
                            // v = beta2 v + (1 - beta2) g^2 is never negative (each
                            // rounding keeps the sign): a negative or NaN entry is a
                            // tampered or corrupt state, not a run's
                            if let Some((k, _)) = mom
                                .v
                                .iter()
                                .enumerate()
                                .find(|(_, x)| ar.sign(x) < 0 || !ar.is_finite(x))
                            {
                                let x = &mom.v[k];
                                let what = match ar.is_finite(x) {
                                    true => {
                                        format!("negative ({}, base 16)", ar.to_exact_string(x))
                                    }
                                    false => ar.to_f64(x).to_string(),
                                };
                                return Err(st.error(format!(
                                    "`{name}` entry {k} is {what}: Adam's second moment is \
                                     a finite number >= 0"
                                )));
                            }
                        }
                    }
                }
                e.compute_q(&ar);
            }
            Engine::Span(e) => {
                read("a", &mut e.a)?;
                read("M", &mut e.m)?;
            }
        }
        self.step = st.step;
        Ok(Recorder::resumed(
            self.cfg,
            st.cumulative,
            st.checkpoints.clone(),
        ))
    }
}
