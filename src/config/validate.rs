//! The domain checks of a [`Config`]: every key's range, the model, prompt and
//! direction sections, in one fixed order (the first bad field is named).

use crate::error::{Error, Result};

use super::{
    Config, Formulation, MAX_CHECKPOINTS_PER_DECADE, MAX_CLASSES, MAX_MU_NORM,
    MAX_NETWORK_PARAMETERS, MAX_STEPS, Method, Mode, PInit, PatternSpec, Signals,
};

impl Config {
    /// Check every field's domain; the error names the first bad field.
    pub fn validate(&self) -> Result<()> {
        let finite = |field: &str, v: f64| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(Error::config(field, format!("must be finite, got {v}")))
            }
        };
        if self.d == 0 {
            return Err(Error::config("d", "must be at least 1"));
        }
        if self.signals == Signals::Axis && self.d < 2 {
            return Err(Error::config(
                "d",
                "axis signals mu_{+1} = ||mu|| e_1, mu_{-1} = ||mu|| e_2 need d >= 2",
            ));
        }
        if self.signals == Signals::Random && self.d < 2 {
            return Err(Error::config("d", "two orthogonal signals need d >= 2"));
        }
        crate::seeds::check("seed", self.seed)?;
        // a network's own keys first: the sections written for the token-selection
        // models would otherwise be refused for their reasons
        self.validate_network()?;
        self.optimizer.validate(self.n_train, self.method)?;
        if let Some(f) = &self.factorised {
            f.validate(self)?;
        }
        if let Some(p) = &self.protocol {
            let classes = if self.model.is_multiclass() {
                self.model.classes
            } else {
                0
            };
            p.validate(classes)?;
        }
        let l = &self.layout;
        if l.tokens == 0 {
            return Err(Error::config("layout.tokens", "must be at least 1"));
        }
        // summed in u128: four usize sizes cannot overflow it, so sizes whose sum wraps
        // usize (and would equal `tokens` modulo 2^64) are refused, not accepted
        let sum: u128 = l.sizes().iter().map(|&s| s as u128).sum();
        if sum != l.tokens as u128 {
            return Err(Error::config(
                "layout",
                format!(
                    "group sizes relevant + weak_same + weak_opposite + irrelevant = {} + {} + {} + {} = {sum} must equal tokens = {}",
                    l.relevant, l.weak_same, l.weak_opposite, l.irrelevant, l.tokens
                ),
            ));
        }
        if self.n_train == 0 {
            return Err(Error::config("n_train", "must be at least 1"));
        }
        if self.n_test == 0 {
            return Err(Error::config("n_test", "must be at least 1"));
        }
        finite("mu_norm", self.mu_norm)?;
        if self.mu_norm <= 0.0 {
            return Err(Error::config("mu_norm", "must be > 0 (nu divides by it)"));
        }
        finite("rho", self.rho)?;
        if !(0.0..=1.0).contains(&self.rho) {
            return Err(Error::config(
                "rho",
                format!(
                    "the weak-relevance factor must lie in [0, 1], got {}",
                    self.rho
                ),
            ));
        }
        if self.mu_norm > MAX_MU_NORM || self.sigma > MAX_MU_NORM {
            return Err(Error::config(
                "mu_norm",
                format!(
                    "||mu|| and sigma must be at most {MAX_MU_NORM:e} (got {:e}, {:e}): scores \
                     x.q grow like their square times |q| and overflow f64 long before 1e154",
                    self.mu_norm, self.sigma
                ),
            ));
        }
        finite("sigma", self.sigma)?;
        if self.sigma < 0.0 {
            return Err(Error::config("sigma", "must be >= 0"));
        }
        finite("eta", self.eta)?;
        if !(0.0..1.0).contains(&self.eta) {
            return Err(Error::config(
                "eta",
                format!("must lie in [0, 1), got {}", self.eta),
            ));
        }
        finite("step_size", self.step_size)?;
        if self.step_size <= 0.0 {
            return Err(Error::config("step_size", "must be > 0"));
        }
        if self.steps > MAX_STEPS {
            return Err(Error::config(
                "steps",
                format!("must be at most {MAX_STEPS}"),
            ));
        }
        finite("init.p_scale", self.init.p_scale)?;
        if self.init.p_scale < 0.0 {
            return Err(Error::config("init.p_scale", "must be >= 0"));
        }
        let p_zero = self.init.p == PInit::Zero || self.init.p_scale == 0.0;
        // without biases, p = 0 gives u = W_Q p = 0: W_K's gradient u (dL/dq)^T and W_Q's
        // (W_K dL/dq) p^T are 0, and p's W_Q^T W_K dL/dq is 0 too when p is fixed or W_Q(0)
        // = 0 (the zero-query init): nothing ever moves
        let stuck = |f: &&crate::model::factorised::Section| {
            p_zero
                && !f.bias
                && (!f.train_p || f.init == crate::model::factorised::QkInit::ZeroQuery)
        };
        if let Some(f) = self.factorised.as_ref().filter(stuck) {
            return Err(Error::config(
                "init.p",
                format!(
                    "[factorised] without biases from p = 0{}: u = W_Q p = 0, so W_K's gradient \
                     u (dL/dq)^T and W_Q's (W_K dL/dq) p^T are 0{}, and nothing moves at any \
                     step. Set init.p = \"gaussian\" with init.p_scale > 0, or bias = true",
                    if f.train_p {
                        " and W_Q(0) = 0"
                    } else {
                        " with p fixed"
                    },
                    if f.train_p {
                        ", as is p's W_Q^T W_K dL/dq"
                    } else {
                        ""
                    }
                ),
            ));
        }
        if self.mode == Mode::W && p_zero && self.factorised.is_none() {
            return Err(Error::config(
                "init.p",
                "mode = \"W\" trains W with p fixed; p = 0 gives dL/dW = p (dL/dq)^T = 0. \
                 Set init.p = \"gaussian\" with init.p_scale > 0",
            ));
        }
        if self.mode == Mode::Joint
            && (self.init.p == PInit::Zero || self.init.p_scale == 0.0)
            && self.optimizer.is_normalized()
            && self.optimizer.eps == 0.0
        {
            return Err(Error::config(
                "optimizer.eps",
                "normalised GD with eps = 0 divides each block's gradient by its norm, and in \
                 joint mode from p(0) = 0 the gradient with respect to W at step 0, \
                 p (dL/dq)^T, is exactly 0: the step alpha G / ||G|| is undefined there. Set \
                 optimizer.eps > 0, or init.p = \"gaussian\" with init.p_scale > 0",
            ));
        }
        if self.method == Method::Span && self.formulation == Formulation::Naive {
            return Err(Error::config(
                "method",
                "method = \"span\" needs formulation = \"stable\": the naive gradient's \
                 error is a d-space cancellation that the span step does not perform",
            ));
        }
        self.validate_model()?;
        self.validate_direction()?;
        if !(1..=MAX_CHECKPOINTS_PER_DECADE).contains(&self.record.checkpoints_per_decade) {
            return Err(Error::config(
                "record.checkpoints_per_decade",
                format!(
                    "must lie in 1..={MAX_CHECKPOINTS_PER_DECADE} (every step is recorded from \
                     {MAX_CHECKPOINTS_PER_DECADE} per decade on)"
                ),
            ));
        }
        self.check_limits()
    }

    /// The `[direction]` section: the binary model, a known pattern name, or one token
    /// index below T per training sample.
    fn validate_direction(&self) -> Result<()> {
        let Some(dir) = &self.direction else {
            return Ok(());
        };
        if self.model.is_multiclass() {
            return Err(Error::config(
                "direction",
                "direction tracking compares with the attention SVM of the binary model; \
                 remove [direction] for a K-class run",
            ));
        }
        match &dir.pattern {
            PatternSpec::Named(s) if s == "theorem" || s == "optimal" => Ok(()),
            PatternSpec::Named(s) => Err(Error::config(
                "direction.pattern",
                format!("must be \"theorem\", \"optimal\" or a list of token indices, got {s:?}"),
            )),
            PatternSpec::Given(v) if v.len() != self.n_train => Err(Error::config(
                "direction.pattern",
                format!(
                    "has {} entries; the training set has {} samples",
                    v.len(),
                    self.n_train
                ),
            )),
            PatternSpec::Given(v) => match v.iter().position(|a| *a >= self.layout.tokens) {
                Some(i) => Err(Error::config(
                    "direction.pattern",
                    format!(
                        "entry {i} is {}, not a token index below T = {}",
                        v[i], self.layout.tokens
                    ),
                )),
                None => Ok(()),
            },
        }
    }

    /// `[model] prompt = "in-sequence"` against the rest: the direct engine in the stable
    /// formulation, full batch, no direction tracking (what is implemented for a prompt
    /// that moves with p; everything else is refused, not computed wrongly).
    fn validate_prompt(&self) -> Result<()> {
        if !self.model.in_sequence() {
            return Ok(());
        }
        let why = |key: &str, what: &str| {
            Err(Error::config(
                key,
                format!("[model] prompt = \"in-sequence\" {what}"),
            ))
        };
        if self.method == Method::Span {
            return why(
                "method",
                "needs the direct step: the span step's Gram matrices assume fixed tokens, \
                 and the prompt token p moves (set method = \"direct\" or \"auto\")",
            );
        }
        if self.formulation == Formulation::Naive {
            return why(
                "formulation",
                "is implemented in the stable formulation only (the naive gradient's d-space \
                 form has no prompt row)",
            );
        }
        if self.optimizer.minibatch(self.n_train).is_some() {
            return why(
                "optimizer.batch",
                "is implemented for full-batch steps only (remove optimizer.batch)",
            );
        }
        if self.direction.is_some() {
            return why(
                "direction",
                "has no attention SVM (the SVM's tokens are fixed; remove [direction])",
            );
        }
        Ok(())
    }

    /// A network model (`[model] kind = "encoder"`): its own keys (`mlp`, `residual`) only
    /// with it, a size whose parameter count is bounded, and none of the sections written
    /// for the token-selection models (the cls token is the encoder's own prompt).
    fn validate_network(&self) -> Result<()> {
        let m = &self.model;
        if !m.is_network() {
            for (key, set) in [
                ("model.mlp", m.mlp.is_some()),
                ("model.residual", m.residual.is_some()),
            ] {
                if set {
                    return Err(Error::config(
                        key,
                        format!(
                            "is a key of the encoder (model.kind = \"encoder\"); this config's \
                             model is {}",
                            m.kind.name()
                        ),
                    ));
                }
            }
            return Ok(());
        }
        let why = |key: &str, what: &str| {
            Err(Error::config(key, format!("the {} {what}", m.kind.name())))
        };
        if m.classes != 2 {
            return why(
                "model.classes",
                &format!(
                    "is binary (labels +1 and -1): classes must be 2, got {}",
                    m.classes
                ),
            );
        }
        if self.mode != Mode::P {
            return why(
                "mode",
                "trains every one of its blocks: mode (which of p and W the token-selection \
                 models train) does not apply (remove it)",
            );
        }
        if self.init != Config::default().init {
            return why(
                "init",
                "draws every block from its own seeded stream: [init] (p(0) and W(0) of the \
                 token-selection models) does not apply (remove it)",
            );
        }
        if m.in_sequence() {
            return why(
                "model.prompt",
                "prepends its own cls token; model.prompt = \"in-sequence\" does not apply \
                 (remove it)",
            );
        }
        let mlp = m.mlp_width(self.d);
        if mlp == 0 {
            return why("model.mlp", "needs an MLP width m >= 1 (absent: m = d)");
        }
        let params = m.encoder_parameters(self.d);
        if params > MAX_NETWORK_PARAMETERS {
            return why(
                "model.mlp",
                &format!(
                    "at d = {} and m = {mlp} has {params} parameters, above the limit of \
                     {MAX_NETWORK_PARAMETERS}",
                    self.d
                ),
            );
        }
        if self.factorised.is_some() {
            return why(
                "factorised",
                "has its own query-key attention (remove [factorised])",
            );
        }
        if self.method == Method::Span {
            return why(
                "method",
                "has no span step (its tokens are normalised by a trained LayerNorm): \
                 remove method = \"span\"",
            );
        }
        if self.direction.is_some() {
            return why(
                "direction",
                "has no attention SVM of fixed tokens (remove [direction])",
            );
        }
        if self.protocol.is_some() {
            return why(
                "protocol",
                "has no fine-tuning protocol (remove [protocol])",
            );
        }
        if self.optimizer.minibatch(self.n_train).is_some() {
            return why(
                "optimizer.batch",
                "trains full batch, as the official code does (remove optimizer.batch)",
            );
        }
        Ok(())
    }

    /// The `[model]` section against the rest: K in range, d >= K signals, K - 1 weakly
    /// relevant tokens per multiple (one per other class), the stable formulation.
    fn validate_model(&self) -> Result<()> {
        self.validate_prompt()?;
        let m = &self.model;
        let k = m.classes;
        if !m.is_multiclass() {
            if k != 2 {
                return Err(Error::config(
                    "model.classes",
                    format!(
                        "the binary token-selection model has 2 classes (got {k}); set \
                         model.kind = \"multiclass\" for K classes"
                    ),
                ));
            }
            return Ok(());
        }
        if !(2..=MAX_CLASSES).contains(&k) {
            return Err(Error::config(
                "model.classes",
                format!("must lie in 2..={MAX_CLASSES}, got {k}"),
            ));
        }
        if self.d < k {
            return Err(Error::config(
                "d",
                format!(
                    "K = {k} orthogonal class signals need d >= {k}, got d = {}",
                    self.d
                ),
            ));
        }
        if !self.layout.weak_opposite.is_multiple_of(k - 1) {
            return Err(Error::config(
                "layout.weak_opposite",
                format!(
                    "the multi-class data has one weakly relevant token per other class: \
                     weak_opposite must be a multiple of K - 1 = {} (got {})",
                    k - 1,
                    self.layout.weak_opposite
                ),
            ));
        }
        if self.formulation == Formulation::Naive {
            return Err(Error::config(
                "formulation",
                "the multi-class model trains in the stable formulation only (its naive \
                 gradient is replayed by judge as a candidate explanation, not a run's \
                 formulation)",
            ));
        }
        Ok(())
    }
}
