//! The one step loop. Every analysis that trains (run and twin, compare, judge, grid
//! cells, Lemma A.6, cost) drives a [`Stepper`] through [`drive`] and observes it; none
//! writes its own loop.
//!
//! ```text
//! loop:
//!     forward_backward                   (scores, attention, outputs, loss, gradient)
//!     observe(Forward)                   (record, measure, compare: at step k)
//!     stop at the last step
//!     update                             (step k -> k + 1)
//!     observe(Update)                    (progress, state saving)
//! ```
//!
//! Several trainers step in lockstep as one stepper: a pair `(S, T)` runs S then T in
//! each phase (its clock is S's), and `Option<S>` is a stepper that may be absent.

use crate::arith::Arith;
use crate::error::Result;

use super::Trainer;

/// Something that takes gradient steps: a forward and backward pass at the current
/// parameters, then an update.
pub trait Stepper {
    /// Evaluate the forward pass and the gradient at the current parameters.
    fn forward_backward(&mut self) -> Result<()>;
    /// One gradient step from the last forward pass.
    fn update(&mut self) -> Result<()>;
}

/// A stepper that knows how many steps it has done.
pub trait Clocked: Stepper {
    /// Updates done.
    fn step(&self) -> u64;
}

impl<A: Arith> Stepper for Trainer<'_, A> {
    fn forward_backward(&mut self) -> Result<()> {
        Trainer::forward_backward(self)
    }

    fn update(&mut self) -> Result<()> {
        Trainer::update(self)
    }
}

impl<A: Arith> Clocked for Trainer<'_, A> {
    fn step(&self) -> u64 {
        self.step
    }
}

/// Two steppers in lockstep: each phase runs the first, then the second.
impl<S: Stepper, T: Stepper> Stepper for (S, T) {
    fn forward_backward(&mut self) -> Result<()> {
        self.0.forward_backward()?;
        self.1.forward_backward()
    }

    fn update(&mut self) -> Result<()> {
        self.0.update()?;
        self.1.update()
    }
}

/// A lockstep pair runs on its first stepper's clock.
impl<S: Clocked, T: Stepper> Clocked for (S, T) {
    fn step(&self) -> u64 {
        self.0.step()
    }
}

/// An optional stepper (absent: nothing to do).
impl<S: Stepper> Stepper for Option<S> {
    fn forward_backward(&mut self) -> Result<()> {
        self.as_mut().map_or(Ok(()), Stepper::forward_backward)
    }

    fn update(&mut self) -> Result<()> {
        self.as_mut().map_or(Ok(()), Stepper::update)
    }
}

/// Where the driver is when it calls the observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The forward pass at step `step()` is done (before the update, if any).
    Forward,
    /// The update to step `step()` is done.
    Update,
}

/// What the observer tells the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Go on.
    Continue,
    /// Stop here (the driver returns `Ok`).
    Stop,
}

/// Drive `s` from its current step to step `until`: a forward pass at every step from
/// the current one to `until` inclusive, observed, and an update after each but the
/// last, observed too. `observe` can stop the run early; its errors and the stepper's
/// (a non-finite value) end the run.
pub fn drive<S, F>(s: &mut S, until: u64, mut observe: F) -> Result<()>
where
    S: Clocked,
    F: FnMut(&S, Event) -> Result<Control>,
{
    loop {
        s.forward_backward()?;
        if observe(s, Event::Forward)? == Control::Stop || s.step() >= until {
            return Ok(());
        }
        s.update()?;
        if observe(s, Event::Update)? == Control::Stop {
            return Ok(());
        }
    }
}
