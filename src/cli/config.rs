//! `tokensel config`: print the config a preset, a file and overrides give.

use super::{ConfigArgs, EXIT_OK};
use crate::error::Result;

pub(super) fn config(args: &ConfigArgs) -> Result<i32> {
    print!("{}", args.load()?.to_toml());
    Ok(EXIT_OK)
}
