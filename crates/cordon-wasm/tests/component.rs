//! WASI preview 2 components: run through `wasi:cli/run`, under the same limits as modules.
//! Written as component text here (Debian's clang 14 cannot build preview 2 components):
//! they export `wasi:cli/run@0.2.0` as toolchains do, and import nothing — or something the
//! host does not provide.

use std::time::Duration;

use cordon_policy::{LimitHit, Outcome, Profile, Status};
use cordon_wasm::{run, GuestStdin, WasmRequest};

/// A component whose `run` is the core function `body` (returning 0 for ok, 1 for err).
fn component(imports: &str, core: &str) -> Vec<u8> {
    let text = format!(
        r#"(component
  {imports}
  (core module $m {core})
  (core instance $i (instantiate $m))
  (func $run (result (result)) (canon lift (core func $i "run")))
  (instance $r (export "run" (func $run)))
  (export "wasi:cli/run@0.2.0" (instance $r)))"#
    );
    wat::parse_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn go(p: &Profile, bytes: Vec<u8>) -> Outcome {
    run(WasmRequest {
        profile: p.clone(),
        module: bytes,
        argv: vec!["c.wasm".into()],
        stdin: GuestStdin::Empty,
        echo: false,
        cache: None,
    })
    .unwrap()
}

fn profile() -> Profile {
    let mut p = Profile::builtin("default").unwrap();
    p.limits.timeout = Duration::from_secs(20);
    p
}

#[test]
fn run_results_are_exit_codes() {
    let ok = component("", r#"(func (export "run") (result i32) (i32.const 0))"#);
    assert_eq!(cordon_wasm::detect(&ok), Some(cordon_wasm::Kind::Component));
    let o = go(&profile(), ok);
    assert_eq!((o.status, o.exit_code), (Status::Exited, Some(0)), "{o:?}");
    let err = component("", r#"(func (export "run") (result i32) (i32.const 1))"#);
    let o = go(&profile(), err);
    assert_eq!((o.status, o.exit_code), (Status::Exited, Some(1)), "{o:?}");
}

#[test]
fn a_spinning_component_times_out() {
    let mut p = profile();
    p.limits.timeout = Duration::from_millis(500);
    let spin = component(
        "",
        r#"(func (export "run") (result i32) (loop $l (br $l)) (i32.const 0))"#,
    );
    let o = go(&p, spin);
    assert_eq!(o.status, Status::Timeout, "{o:?}");
    assert_eq!(o.limits_hit, [LimitHit::WallTime]);
}

#[test]
fn a_growing_component_is_oom() {
    let mut p = profile();
    p.limits.memory = 16 << 20;
    let grow = component(
        "",
        r#"(memory 1)
           (func (export "run") (result i32)
             (loop $l (drop (memory.grow (i32.const 16))) (br $l))
             (i32.const 0))"#,
    );
    let o = go(&p, grow);
    assert_eq!(o.status, Status::Oom, "{o:?}");
    assert_eq!(o.limits_hit, [LimitHit::Memory]);
    assert!(o.usage.peak_memory_bytes <= 16 << 20, "{:?}", o.usage);
}

#[test]
fn a_trapping_component_is_an_error() {
    let trap = component("", r#"(func (export "run") (result i32) (unreachable))"#);
    let o = go(&profile(), trap);
    assert_eq!(o.status, Status::Error, "{o:?}");
    assert_eq!(o.exit_code, Some(134));
    assert!(o.error.unwrap_or_default().contains("unreachable"));
}

#[test]
fn an_unknown_import_is_a_clear_error() {
    let c = component(
        r#"(import "cordon:test/missiles" (instance (export "launch" (func))))"#,
        r#"(func (export "run") (result i32) (i32.const 0))"#,
    );
    let o = go(&profile(), c);
    assert_eq!(o.status, Status::Error, "{o:?}");
    assert_eq!(o.exit_code, Some(126));
    let err = o.error.unwrap_or_default();
    assert!(err.contains("cordon:test/missiles"), "{err}");
}

#[test]
fn a_component_without_a_run_export_is_refused() {
    let text = r#"(component (core module $m))"#;
    let o = go(&profile(), wat::parse_str(text).unwrap());
    assert_eq!(o.status, Status::Error, "{o:?}");
    assert_eq!(o.exit_code, Some(126), "{o:?}");
}
