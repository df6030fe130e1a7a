//! Charts (SVG, and PNG through resvg) and the readable run report.

pub mod heatmap;
pub mod plot;
pub mod run;
