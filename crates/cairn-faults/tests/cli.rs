//! The `cairn-faults` command line: what a user running the long mode sees first.

use std::process::Command;

use cairn_faults::nemesis::FaultKind;

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cairn-faults"))
        .args(args)
        .output()
        .expect("run cairn-faults")
}

#[test]
fn kinds_lists_every_fault_kind() {
    let out = cli(&["kinds"]);
    assert!(out.status.success());
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let all: Vec<String> = FaultKind::ALL
        .iter()
        .map(|k| k.name().to_string())
        .collect();
    assert_eq!(listed, all);
}

#[test]
fn bad_input_is_refused_with_a_clear_error() {
    let out = cli(&["run", "--kinds", "meteor-strike"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown fault kind 'meteor-strike'"), "{err}");

    let out = cli(&["run", "--cairn-bin", "/nonexistent/cairn"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/cairn does not exist"), "{err}");
}

#[test]
fn run_help_explains_the_long_mode_knobs() {
    let out = cli(&["run", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--cycles",
        "--kinds",
        "--fault-secs",
        "--seed",
        "--cairn-bin",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}
