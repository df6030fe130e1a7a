//! Scaffolding shared by the integration tests.
#![allow(dead_code)]

use tokensel::arith::F64;
use tokensel::config::{Config, Method};
use tokensel::data::Dataset;
use tokensel::io::trajectory::Trajectory;
use tokensel::train::{Params, Trainer};

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
