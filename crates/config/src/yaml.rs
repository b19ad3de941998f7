//! The YAML 1.1 loader scores share with every other YAML file (`mozart-yaml`).

pub use mozart_yaml::*;
