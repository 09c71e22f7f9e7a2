use super::*;
use crate::runners::runner;
use crate::workspace::{prebuilt_dir, target_dir};

/// Copy `from` to `to`, leaving out build outputs.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().unwrap().is_dir() {
            if entry.file_name() != "target" {
                copy_tree(&src, &dst);
            }
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

#[test]
fn a_backend_crate_copied_under_a_new_name_is_discovered_with_no_other_edit() {
    // A scratch workspace with this one's manifest and crates, plus kiln-flex copied as
    // kiln-newname with only its own Cargo.toml renamed: what docs/backends.md tells a
    // user to do. Discovery reads real `cargo metadata` output of that workspace.
    let tmp = tempfile::tempdir().unwrap();
    let root = workspace_root();
    for file in ["Cargo.toml", "Cargo.lock"] {
        std::fs::copy(root.join(file), tmp.path().join(file)).unwrap();
    }
    copy_tree(&root.join("crates"), &tmp.path().join("crates"));
    copy_tree(&root.join("xtask"), &tmp.path().join("xtask"));
    let new = tmp.path().join("crates/kiln-newname");
    copy_tree(&root.join("crates/kiln-flex"), &new);
    let manifest = std::fs::read_to_string(new.join("Cargo.toml")).unwrap();
    let renamed = manifest
        .replace("name = \"kiln-flex\"", "name = \"kiln-newname\"")
        .replace("backend = \"flex\"", "backend = \"newname\"")
        .replace("default = true", "default = false");
    assert_ne!(manifest, renamed, "the copy must declare itself anew");
    std::fs::write(new.join("Cargo.toml"), renamed).unwrap();

    let found = discover(tmp.path()).unwrap();
    let names: Vec<&str> = found.iter().map(|b| b.name.as_str()).collect();
    for expected in ["flex", "ndarray", "wgpu", "tch", "newname", "pytorch"] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let newname = found.iter().find(|b| b.name == "newname").unwrap();
    assert_eq!(
        newname.source,
        Source::Cargo {
            package: "kiln-newname".into(),
            requires: None
        }
    );
    assert!(!newname.default && !newname.needs_torch());
    let tch = found.iter().find(|b| b.name == "tch").unwrap();
    assert!(tch.needs_torch());
    let wgpu = found.iter().find(|b| b.name == "wgpu").unwrap();
    assert_eq!(
        wgpu.default,
        gpu_here().is_some(),
        "wgpu joins the default matrix only where a GPU is"
    );
    for (name, package, library) in [
        ("cuda", "kiln-cuda", "libcuda.so.1"),
        ("rocm", "kiln-rocm", "libamdhip64.so"),
    ] {
        let b = found.iter().find(|b| b.name == name).unwrap();
        let Source::Cargo {
            package: p,
            requires: Some(Requirement::Driver(d)),
        } = &b.source
        else {
            panic!("{name}: {:?}", b.source)
        };
        assert_eq!(
            (p.as_str(), d.library.as_str(), d.feature.as_str()),
            (package, library, name)
        );
    }
    assert_eq!(names.last(), Some(&"pytorch"), "the reference comes last");
}

#[test]
fn packages_gather_by_build_group_each_once_and_in_order() {
    let groups = by_build_group([
        (Some("cpu"), "kiln-flex"),
        (None, "kiln-wgpu"),
        (Some("cpu"), "kiln-ndarray"),
        (None, "kiln-remote"),
        (Some("cpu"), "kiln-flex"),
        (None, "kiln-wgpu"),
    ]);
    assert_eq!(
        groups,
        vec![
            vec!["kiln-flex", "kiln-ndarray"],
            vec!["kiln-wgpu"],
            vec!["kiln-remote"]
        ]
    );
}

#[test]
fn a_declared_default_is_a_yes_a_no_or_a_condition() {
    let parse = |v: serde_json::Value| {
        serde_json::from_value::<Declared>(
            serde_json::json!({"backend": "x", "summary": "s", "default": v}),
        )
        .map(|d| d.default)
    };
    assert_eq!(parse(true.into()).unwrap(), InMatrix::Always(true));
    assert_eq!(parse(false.into()).unwrap(), InMatrix::Always(false));
    assert_eq!(parse("gpu".into()).unwrap(), InMatrix::When(Condition::Gpu));
    assert!(parse("sometimes".into()).is_err());
    let absent: Declared =
        serde_json::from_value(serde_json::json!({"backend": "x", "summary": "s"})).unwrap();
    assert_eq!(absent.default, InMatrix::Never);
}

#[test]
fn a_driver_gated_runner_is_built_where_its_driver_loads_and_elsewhere_says_why() {
    for (name, library, var) in [
        ("cuda", "libcuda.so.1", "KILN_BUILD_CUDA=1"),
        ("rocm", "libamdhip64.so", "KILN_BUILD_ROCM=1"),
    ] {
        let b = find(name).expect("the crate declares its backend");
        let Source::Cargo {
            requires: Some(r), ..
        } = &b.source
        else {
            panic!("{name} declares no requirement")
        };
        match (r.met(), unbuildable(b), runner(b)) {
            // A machine with the driver (or KILN_BUILD_X=1): built in the target dir.
            (Ok(()), None, Ok(run)) if prebuilt_dir().is_none() => {
                assert!(run.program.starts_with(target_dir()), "{run:?}");
            }
            (Ok(()), None, Ok(_)) => {}
            // Without one (this project's CI): doctor and bench-all name the missing driver.
            (Err(why), Some(skip), Err(no_runner)) => {
                assert!(why.contains(library) && why.contains(var), "{why}");
                assert_eq!(skip, why);
                assert_eq!(no_runner, why);
            }
            other => panic!("{name}: inconsistent: {other:?}"),
        }
    }
}

#[test]
fn a_driver_requirement_needs_its_table_and_the_table_its_requirement() {
    let package = |kiln: serde_json::Value| {
        fake_metadata(serde_json::json!([{
            "name": "kiln-x",
            "manifest_path": "/w/crates/kiln-x/Cargo.toml",
            "metadata": {"kiln": kiln},
            "targets": [{"name": "kiln-x", "kind": ["bin"]}],
        }]))
    };
    let driver = serde_json::json!({"library": "libx.so", "feature": "x-gpu", "install": "X"});
    let ok = from_metadata(&package(serde_json::json!({
        "backend": "x", "summary": "X", "requires": "driver", "driver": driver.clone()
    })))
    .unwrap();
    let Source::Cargo {
        requires: Some(Requirement::Driver(d)),
        ..
    } = &ok[0].source
    else {
        panic!("{:?}", ok[0].source)
    };
    assert_eq!(d.build_anyway_var(), "KILN_BUILD_X_GPU");
    let why = d.met().unwrap_err();
    assert_eq!(
        why,
        "no X-GPU driver (libx.so not found: install X; KILN_BUILD_X_GPU=1 builds the \
         runner anyway)"
    );
    let err = from_metadata(&package(serde_json::json!({
        "backend": "x", "summary": "X", "requires": "driver"
    })))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("kiln-x/Cargo.toml") && err.contains("driver] table"),
        "{err}"
    );
    let err = from_metadata(&package(serde_json::json!({
        "backend": "x", "summary": "X", "driver": driver
    })))
    .unwrap_err()
    .to_string();
    assert!(err.contains("requires = \"driver\""), "{err}");
}

#[test]
fn a_declaration_without_a_runner_or_with_a_typo_is_refused_by_name() {
    let package = |kiln: serde_json::Value, bin: &str| {
        fake_metadata(serde_json::json!([{
            "name": "kiln-x",
            "manifest_path": "/w/crates/kiln-x/Cargo.toml",
            "metadata": {"kiln": kiln},
            "targets": [{"name": bin, "kind": ["bin"]}],
        }]))
    };
    let good = serde_json::json!({"backend": "x", "summary": "X"});
    assert_eq!(
        from_metadata(&package(good.clone(), "kiln-x")).unwrap()[0].name,
        "x"
    );
    let err = from_metadata(&package(good, "other"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("kiln-x/Cargo.toml") && err.contains("no binary"),
        "{err}"
    );
    let typo = serde_json::json!({"backend": "x", "summary": "X", "defualt": true});
    let err = format!("{:#}", from_metadata(&package(typo, "kiln-x")).unwrap_err());
    assert!(err.contains("defualt"), "{err}");
}
