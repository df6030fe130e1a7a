//! Charts (SVG, and PNG through resvg).

pub mod plot;
