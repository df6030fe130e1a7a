//! The named embedded configurations, the default config and the TOML overlay read
//! over them.

use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

use super::Config;

/// A named embedded configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// The paper's balanced setting, Figure 3(a): the default.
    Balanced,
    /// Large noise (harmful overfitting), Figure 3(b).
    LargeNoise,
    /// Large signal (no overfitting), Figure 3(c).
    LargeSignal,
    /// The label-noise sweep setting (d = 6000, ||mu|| = 100, rho = 0.05, n = 100).
    LabelNoiseSweep,
    /// The official code as of 2025: p and W trained jointly from a Kaiming-uniform W.
    OfficialFinal,
}

impl Preset {
    /// All presets.
    pub const ALL: [Preset; 5] = [
        Preset::Balanced,
        Preset::LargeNoise,
        Preset::LargeSignal,
        Preset::LabelNoiseSweep,
        Preset::OfficialFinal,
    ];

    /// The preset's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Balanced => "balanced",
            Preset::LargeNoise => "large-noise",
            Preset::LargeSignal => "large-signal",
            Preset::LabelNoiseSweep => "label-noise-sweep",
            Preset::OfficialFinal => "official-final",
        }
    }

    /// Look a preset up by name.
    pub fn from_name(name: &str) -> Result<Preset> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Preset::ALL.iter().map(|p| p.name()).collect();
                Error::argument(
                    "preset",
                    format!("unknown preset `{name}` (known: {})", names.join(", ")),
                )
            })
    }

    /// The preset's TOML overlay text.
    pub fn toml(self) -> &'static str {
        match self {
            Preset::Balanced => BALANCED_TOML,
            Preset::LargeNoise => include_str!("../presets/large_noise.toml"),
            Preset::LargeSignal => include_str!("../presets/large_signal.toml"),
            Preset::LabelNoiseSweep => include_str!("../presets/label_noise_sweep.toml"),
            Preset::OfficialFinal => include_str!("../presets/official_final.toml"),
        }
    }

    /// The preset as a validated config.
    pub fn config(self) -> Config {
        Config::from_toml_str(self.toml(), Path::new(self.name()))
            .expect("embedded presets are valid (tested)")
    }
}

const BALANCED_TOML: &str = include_str!("../presets/balanced.toml");

impl Default for Config {
    /// The paper's balanced setting (`src/presets/balanced.toml`).
    fn default() -> Self {
        let table: toml::Table = toml::from_str(BALANCED_TOML).expect("embedded default parses");
        table.try_into().expect("embedded default is complete")
    }
}

/// Deep-merge `overlay` into `base` (tables merge key by key, other values replace).
fn merge(base: &mut toml::Table, overlay: toml::Table) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(key, v);
            }
        }
    }
}

impl Config {
    /// Parse a TOML overlay on the default config and validate it. A K-class model
    /// (`[model] kind = "multiclass"`) whose overlay sets no `[layout]` gets the
    /// default layout for K ([`Layout::for_classes`](super::Layout::for_classes): one
    /// weakly relevant token per other class).
    ///
    /// `origin` names the source in error messages.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Config> {
        Config::from_toml_str_over(text, origin, BALANCED_TOML)
    }

    /// Parse a TOML overlay on a preset and validate it.
    pub fn from_toml_str_over_preset(text: &str, origin: &Path, preset: Preset) -> Result<Config> {
        let mut base: toml::Table = toml::from_str(BALANCED_TOML).expect("embedded default parses");
        let preset_table: toml::Table = toml::from_str(preset.toml()).expect("presets parse");
        merge(&mut base, preset_table);
        let base_text = toml::to_string(&base).expect("table serialises");
        Config::from_toml_str_over(text, origin, &base_text)
    }

    fn from_toml_str_over(text: &str, origin: &Path, base: &str) -> Result<Config> {
        let parse_err = |message: String| Error::Parse {
            what: "config",
            path: origin.to_path_buf(),
            message,
        };
        let overlay: toml::Table = toml::from_str(text).map_err(|e| parse_err(e.to_string()))?;
        // the layout follows K unless the user sets it (a layout set is kept, validated)
        let layout_set = overlay.contains_key("layout");
        let mut table: toml::Table = toml::from_str(base).expect("embedded default parses");
        merge(&mut table, overlay);
        let mut config: Config = Config::deserialize(toml::Value::Table(table))
            .map_err(|e| parse_err(e.to_string().trim_end().to_string()))?;
        // (only a valid K: an invalid one is refused as `model.classes` by validate)
        let k = config.model.classes;
        if !layout_set && config.model.is_multiclass() && (2..=super::MAX_CLASSES).contains(&k) {
            config.layout = config.layout.for_classes(k);
        }
        config.validate()?;
        Ok(config)
    }

    /// The config as TOML text (round-trips through [`Config::from_toml_str`]).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("config serialises")
    }
}
