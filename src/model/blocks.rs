//! Parameter blocks: a model's trained (or fixed) parameters as named blocks with
//! resolved shapes, each drawn from its own named seeded stream, stored in declaration
//! order ([`Blocks`]). Every consumer (the step rules, Adam's moments, the resumable
//! state) loops over the blocks instead of naming fields, so a new model declares its
//! blocks and nothing else.
//!
//! Both query maps (`model::query`) hold their parameters as blocks: the linear map's
//! `W` and `p` (the p / W / joint modes) and the factorised map's `W_Q`, `W_K`, `b_Q`,
//! `b_K`, `p`; the direct engine's step loop (`train::direct`), Adam's moments and the
//! resumable state loop over them (the span engine keeps p and W in span coordinates).
//!
//! # Streams
//! A block's stream is a ChaCha20 stream of the config's seed, with a stream id of its
//! own ([`BlockStream`]): ids from 64 up, disjoint from the data's and the trainer's
//! streams ([`crate::rng::Stream`], ids 1-10), so declaring a block never changes
//! another draw.

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

use crate::arith::Arith;
use crate::rng;

/// A named seeded stream of a block: the ChaCha20 stream `id` of the config's seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockStream {
    /// The stream's name (for messages and docs).
    pub name: &'static str,
    /// The ChaCha20 stream id (>= [`FIRST_BLOCK_STREAM`]).
    pub id: u64,
}

/// The first stream id of a block stream: above every id of [`crate::rng::Stream`].
pub const FIRST_BLOCK_STREAM: u64 = 64;

impl BlockStream {
    /// The seeded generator of this stream under `seed`.
    pub fn rng(self, seed: u64) -> ChaCha20Rng {
        let mut r = ChaCha20Rng::seed_from_u64(seed);
        r.set_stream(self.id);
        r
    }
}

/// How a block's initial values are drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockInit {
    /// Every entry 0 (nothing drawn).
    Zero,
    /// Every entry U(-bound, bound): (2 u - 1) bound with u uniform on [0, 1) with 53
    /// random bits ([`crate::rng::uniform`]), in entry order (row-major): PyTorch's
    /// `nn.Linear` init with bound = 1 / sqrt(fan_in).
    Uniform {
        /// The bound.
        bound: f64,
    },
    /// Every entry N(0, scale^2), Box-Muller pairs in entry order
    /// ([`crate::rng::fill_normal`]).
    Gaussian {
        /// The standard deviation.
        scale: f64,
    },
    /// A (semi-)orthogonal matrix times `gain`: PyTorch's `nn.init.orthogonal_`. The
    /// block's shape is read as (rows, cols) = (`shape[0]`, the product of the rest); a
    /// Gaussian (rows, cols) matrix is drawn from the block's stream (Box-Muller pairs in
    /// entry order, [`crate::rng::fill_normal`]), transposed when rows < cols, factored
    /// A = Q R by a Householder QR in f64 ([`crate::linalg::householder_q`]), the
    /// columns of Q multiplied by sign(R_kk) (so that Q is the unique factor with a
    /// positive diagonal of R: Haar-distributed), transposed back when rows < cols and
    /// multiplied by `gain`. The draw is torch's in distribution, not in bits (torch's
    /// generator is not ChaCha20).
    Orthogonal {
        /// The factor applied to Q (torch's `gain`, 1 by default).
        gain: f64,
    },
    /// Values given by the caller (e.g. the config's p(0), drawn from the `init` stream
    /// as every mode draws it), f64, row-major.
    Given(Vec<f64>),
    /// The run's initial parameters ([`crate::data::Params`]: p(0) from the `init`
    /// stream, W(0) the identity's dense form or supplied), converted by the map that
    /// declares the block; not kept here (a d x d W(0) is not copied), so not drawn by
    /// [`Block::draw`].
    Initial,
}

/// One parameter block: its name, resolved shape, initial values, stream and whether
/// it trains.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// The block's name (the key in state files).
    pub name: &'static str,
    /// The resolved shape (row-major; one entry for a vector).
    pub shape: Vec<usize>,
    /// How its initial values are drawn.
    pub init: BlockInit,
    /// Its seeded stream (unused by `Zero` and `Given`).
    pub stream: BlockStream,
    /// Whether the step rules move it.
    pub trained: bool,
    /// Whether its exact gradient is 0 for every parameter and data set (a structural
    /// zero, as b_K's: a shift of every score of a sample): the step takes it as
    /// exactly 0, so its Adam moments stay exactly 0 (a state with another value is
    /// refused).
    pub zero_grad: bool,
}

impl Block {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the block has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The initial values in f64, drawn from the block's stream under `seed` (`None`
    /// for [`BlockInit::Initial`], which the declaring map converts itself).
    pub fn draw(&self, seed: u64) -> Option<Vec<f64>> {
        let n = self.len();
        Some(match &self.init {
            BlockInit::Zero => vec![0.0; n],
            BlockInit::Uniform { bound } => {
                let mut r = self.stream.rng(seed);
                (0..n)
                    .map(|_| (2.0 * rng::uniform(&mut r) - 1.0) * bound)
                    .collect()
            }
            BlockInit::Gaussian { scale } => {
                let mut r = self.stream.rng(seed);
                let mut v = vec![0.0; n];
                rng::fill_normal(&mut r, *scale, &mut v);
                v
            }
            BlockInit::Orthogonal { gain } => {
                let rows = self.shape.first().copied().unwrap_or(1);
                let cols = n / rows.max(1);
                let mut a = vec![0.0; n];
                rng::fill_normal(&mut self.stream.rng(seed), 1.0, &mut a);
                // torch: factor the tall orientation (rows >= cols)
                let (m, k) = if rows < cols {
                    a = transpose(&a, rows, cols);
                    (cols, rows)
                } else {
                    (rows, cols)
                };
                let q = crate::linalg::householder_q(&a, m, k);
                let q = if rows < cols { transpose(&q, m, k) } else { q };
                q.into_iter().map(|v| v * gain).collect()
            }
            BlockInit::Given(v) => v.clone(),
            BlockInit::Initial => return None,
        })
    }
}

/// The transpose of the row-major (rows, cols) matrix `a`.
fn transpose(a: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    (0..cols)
        .flat_map(|j| (0..rows).map(move |i| a[i * cols + j]))
        .collect()
}

/// The values of a model's blocks in the arithmetic, in declaration order (no hash
/// order anywhere: every loop over them, and every output, follows the declaration).
#[derive(Debug, Clone, PartialEq)]
pub struct Blocks<R> {
    /// The declarations.
    pub decl: Vec<Block>,
    /// The values, one vector per declaration (row-major).
    pub values: Vec<Vec<R>>,
}

impl<R: Clone> Blocks<R> {
    /// The blocks `decl` at their initial values ([`Block::draw`] under `seed`),
    /// converted exactly into `ar`; a declaration must not be [`BlockInit::Initial`]
    /// (a map that declares one builds its values itself).
    pub fn init<A: Arith<Real = R>>(ar: &A, decl: Vec<Block>, seed: u64) -> Self {
        let values = decl
            .iter()
            .map(|b| {
                let v = b.draw(seed).expect("a drawn or given block");
                ar.of_slice(&v)
            })
            .collect();
        Blocks { decl, values }
    }

    /// The position of block `name` (a declared name; panics otherwise: a programming
    /// error, never input).
    pub fn index(&self, name: &str) -> usize {
        self.decl
            .iter()
            .position(|b| b.name == name)
            .unwrap_or_else(|| panic!("no block named {name}"))
    }

    /// Whether a block `name` is declared.
    pub fn has(&self, name: &str) -> bool {
        self.decl.iter().any(|b| b.name == name)
    }

    /// The values of block `name`.
    pub fn get(&self, name: &str) -> &[R] {
        &self.values[self.index(name)]
    }

    /// The values of block `name`, mutably.
    pub fn get_mut(&mut self, name: &str) -> &mut Vec<R> {
        let i = self.index(name);
        &mut self.values[i]
    }

    /// (declaration, values) of every block, in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = (&Block, &Vec<R>)> {
        self.decl.iter().zip(&self.values)
    }

    /// (declaration, values) of every block, mutably, in declaration order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Block, &mut Vec<R>)> {
        self.decl.iter().zip(self.values.iter_mut())
    }

    /// The values of every block rounded to f64, in declaration order (e.g. for an
    /// array export).
    pub fn to_f64<A: Arith<Real = R>>(&self, ar: &A) -> Vec<(&'static str, Vec<usize>, Vec<f64>)> {
        self.iter()
            .map(|(b, v)| {
                (
                    b.name,
                    b.shape.clone(),
                    v.iter().map(|x| ar.to_f64(x)).collect(),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arith::F64;

    /// Block streams are disjoint from every data and trainer stream, and a block's
    /// draw depends on its stream and the seed only.
    #[test]
    fn block_streams_are_their_own() {
        assert!((crate::rng::Stream::HeadOrder as u64) < FIRST_BLOCK_STREAM);
        let s = BlockStream {
            name: "t",
            id: FIRST_BLOCK_STREAM,
        };
        let b = Block {
            name: "x",
            shape: vec![2, 3],
            init: BlockInit::Uniform { bound: 0.5 },
            stream: s,
            trained: true,
            zero_grad: false,
        };
        let v = b.draw(7).unwrap();
        assert_eq!(v.len(), 6);
        assert!(v.iter().all(|x| x.abs() <= 0.5));
        assert_eq!(Some(&v), b.draw(7).as_ref());
        assert_ne!(Some(&v), b.draw(8).as_ref());
        let other = Block {
            name: "y",
            stream: BlockStream {
                name: "u",
                id: FIRST_BLOCK_STREAM + 1,
            },
            ..b.clone()
        };
        assert_ne!(Some(v.clone()), other.draw(7));
        let blocks = Blocks::init(&F64, vec![b, other], 7);
        assert_eq!(blocks.get("x"), &v[..]);
        assert_eq!(
            blocks.iter().map(|(b, _)| b.name).collect::<Vec<_>>(),
            ["x", "y"]
        );
    }

    /// `Orthogonal` is torch's `orthogonal_`: seeded by the block's stream and seed
    /// only, orthonormal columns (rows for a wide block) to the bound of
    /// [`crate::linalg::householder_q`] (8 m k u), times the gain.
    #[test]
    fn orthogonal_blocks_are_seeded_orthonormal_and_scaled() {
        let s = BlockStream {
            name: "W",
            id: FIRST_BLOCK_STREAM + 3,
        };
        let block = |shape: Vec<usize>, gain: f64, stream: BlockStream| Block {
            name: "W",
            shape,
            init: BlockInit::Orthogonal { gain },
            stream,
            trained: true,
            zero_grad: false,
        };
        for (rows, cols) in [(16, 16), (9, 4), (3, 7)] {
            let b = block(vec![rows, cols], 1.0, s);
            let w = b.draw(11).unwrap();
            assert_eq!(Some(&w), b.draw(11).as_ref());
            assert_ne!(Some(&w), b.draw(12).as_ref());
            let other = block(
                vec![rows, cols],
                1.0,
                BlockStream {
                    name: "V",
                    id: FIRST_BLOCK_STREAM + 4,
                },
            );
            assert_ne!(Some(&w), other.draw(11).as_ref());
            // the orthonormal side: columns of a tall block, rows of a wide one
            let (m, k) = (rows.max(cols), rows.min(cols));
            let at = |l: usize, i: usize| {
                if rows >= cols {
                    w[l * cols + i]
                } else {
                    w[i * cols + l]
                }
            };
            let tol = 8.0 * (m * k) as f64 * f64::EPSILON / 2.0;
            for i in 0..k {
                for j in 0..k {
                    let g: f64 = (0..m).map(|l| at(l, i) * at(l, j)).sum();
                    let want = if i == j { 1.0 } else { 0.0 };
                    assert!((g - want).abs() <= tol, "{rows}x{cols}: {i},{j}: {g:e}");
                }
            }
            let scaled = block(vec![rows, cols], 2.5, s).draw(11).unwrap();
            for (a, b) in scaled.iter().zip(&w) {
                assert_eq!(*a, 2.5 * b);
            }
        }
    }
}
