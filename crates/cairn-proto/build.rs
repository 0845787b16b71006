//! Generates the gRPC code with a vendored `protoc`, so a fresh machine needs no
//! system protobuf compiler.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; prost-build reads PROTOC.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let protos = ["proto/cairn.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        .bytes(".")
        .compile_protos(&protos, &["proto"])?;
    Ok(())
}
