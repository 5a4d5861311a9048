//! Generated tables are reproducible from a clone: running their generators gives the committed
//! files byte for byte (the device catalogue from `data/devices.json`, the ONNX operator schemas
//! from the pinned `onnx` package).

use super::common::{repo_root, venv_python};

fn generate(python: &std::path::Path, script: &str) -> String {
    let output = std::process::Command::new(python)
        .arg(repo_root().join(script))
        .current_dir(repo_root())
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn committed(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap()
}

#[test]
fn device_catalogue_matches_its_source_data() {
    let generated = generate(std::path::Path::new("python3"), "scripts/gen_catalog.py");
    assert!(
        generated == committed("src/device/catalog_data.rs"),
        "src/device/catalog_data.rs is stale: run python3 scripts/gen_catalog.py > src/device/catalog_data.rs"
    );
}

#[test]
fn onnx_schema_table_matches_the_pinned_onnx_package() {
    let Some(python) = venv_python() else {
        return;
    };
    let generated = generate(&python, "scripts/gen_onnx_schema.py");
    assert!(
        generated == committed("src/analysis/schema_data.rs"),
        "src/analysis/schema_data.rs is stale: run .venv/bin/python scripts/gen_onnx_schema.py > src/analysis/schema_data.rs"
    );
}
