//! The benches' draws: one generator ([`Rng`], SplitMix64) and one Zipf's
//! law over ranks ([`Zipf`]), so that every bench that draws keys draws
//! them the same way, from fixed seeds, the same from run to run, with no
//! dependency. The traces of `benches/hit_ratio.rs`, the key sequences of
//! `benches/l1_hit.rs`, the ids of `benches/batch.rs` and the readers of
//! `benches/cluster` all come from here.

/// SplitMix64: a 64-bit state stepped by the golden ratio and mixed; the
/// same numbers for a seed from run to run.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64-bit number.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    #[allow(clippy::cast_precision_loss)]
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1_u64 << 53) as f64
    }

    /// Uniform in `0..n`.
    #[allow(clippy::cast_possible_truncation)]
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

/// Zipf's law over ranks `0..n`, `P(k) ∝ (k + 1)^-s`, drawn by inverting
/// its distribution.
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Zipf {
        let mut total = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|rank| {
                #[allow(clippy::cast_precision_loss)]
                let weight = (rank as f64).powf(-s);
                total += weight;
                total
            })
            .collect();
        for c in &mut cdf {
            *c /= total;
        }
        Zipf { cdf }
    }

    /// A rank drawn with `rng`.
    pub fn rank(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

impl Rng {
    /// Log-uniform in `1..=n`: as many draws between 1 and 10 as between
    /// 10 and 100 (the distance of a re-read in `benches/hit_ratio.rs`).
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    pub fn log_uniform(&mut self, n: usize) -> usize {
        let drawn = (self.unit() * (n as f64).ln()).exp() as usize;
        drawn.clamp(1, n)
    }
}
