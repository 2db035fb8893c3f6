//! Figures of a sample, shared by the bench's binaries.

/// The value at quantile `p` (0 to 1) of `sorted`, nearest rank; NaN when
/// empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
