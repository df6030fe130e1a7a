//! Charts (SVG, and PNG through resvg) and the readable run report.

pub(crate) mod heatmap;
pub(crate) mod plot;
pub(crate) mod run;
