//! Compiles `schemas/` with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read when the script runs, not baked in when it is compiled: a target directory shared
    // by clones at different paths (CI's fresh clones) reuses this script's binary, and a
    // compiled-in path would point at a clone that may be gone.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR unset")?;
    let schemas = std::path::Path::new(&manifest_dir).join("../schemas");
    let proto = schemas.join("fairshare/v1/fairshare.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let descriptors = protox::compile([&proto], [&schemas])?;
    prost_build::Config::new()
        .bytes(["."])
        // Operators read events as JSON (`fairshare tail --json`).
        .type_attribute(".", "#[derive(serde::Serialize)]")
        // ... with enumeration values by name (src/json.rs).
        .field_attribute(
            "fairshare.v1.Rejection.code",
            "#[serde(serialize_with = \"crate::json::rejection_code\")]",
        )
        .field_attribute(
            "fairshare.v1.PreemptionOrdered.cause",
            "#[serde(serialize_with = \"crate::json::preemption_cause\")]",
        )
        // ... and the launcher's payload as text where it is text (src/json.rs).
        .field_attribute(
            "fairshare.v1.JobSpec.payload",
            "#[serde(serialize_with = \"crate::json::payload\")]",
        )
        .compile_fds(descriptors)?;
    Ok(())
}
