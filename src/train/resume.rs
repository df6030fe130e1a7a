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

use crate::arith::Arith;
use crate::error::Result;
use crate::io::state::{STATE_FORMAT, State};
use crate::model::Model;
use crate::model::query::QueryMap;

use super::record::Recorder;
use super::{Engine, Trainer};

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
    /// belongs to this run (config, arithmetic, formulation, method); returns the
    /// recorder that continues it.
    pub fn restore(&mut self, st: &State) -> Result<Recorder> {
        st.check(self.cfg, &self.info())?;
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
                            read(&format!("{pre}adam.m.{}", b.name), &mut mom.m)?;
                            let name = format!("{pre}adam.v.{}", b.name);
                            read(&name, &mut mom.v)?;
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
