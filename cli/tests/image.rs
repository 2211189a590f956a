//! The container image recipe (`Dockerfile`) and the chart that runs it must agree: a
//! multi-stage build of a static binary, an empty final image, pinned base images, and the
//! numeric non-root user the chart's Deployments run as, with the entrypoint their arguments
//! follow. These checks read the files; building the image needs a registry this machine does
//! not reach (docs/image.md says what was proven by hand and what is not).

use std::path::PathBuf;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The Dockerfile's instructions (continuation lines joined, comments dropped) as
/// (keyword, rest).
fn instructions() -> Vec<(String, String)> {
    let text = read("Dockerfile").replace("\\\n", " ");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (keyword, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            (keyword.to_ascii_uppercase(), rest.trim().to_string())
        })
        .collect()
}

/// The instructions of the last stage.
fn final_stage(all: &[(String, String)]) -> &[(String, String)] {
    let start = all.iter().rposition(|(k, _)| k == "FROM").expect("a FROM");
    &all[start..]
}

/// The pod securityContext of a rendered-by-eye Deployment template: `runAsUser` and
/// `runAsGroup`, read from the template text.
fn chart_ids(template: &str) -> (String, String) {
    let text = read(&format!("charts/drover/templates/{template}"));
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}:")).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("{template} sets no {name}"))
    };
    (field("runAsUser"), field("runAsGroup"))
}

#[test]
fn the_image_is_a_static_binary_in_an_empty_final_stage() {
    let all = instructions();
    let froms: Vec<&String> = all.iter().filter(|(k, _)| k == "FROM").map(|(_, r)| r).collect();
    assert!(froms.len() >= 2, "a multi-stage build: {froms:?}");
    for from in &froms {
        let image = from.split_whitespace().next().unwrap_or_default();
        let pinned =
            image == "scratch" || image.contains('@') || image.rsplit_once(':').is_some_and(|(_, tag)| tag != "latest");
        assert!(pinned, "base image {image} is not pinned to a tag or digest");
    }
    let last = final_stage(&all);
    assert_eq!(last[0].1, "scratch", "the final stage is empty");
    let build: String =
        all.iter().filter(|(k, _)| k == "RUN" || k == "ENV").map(|(_, r)| r.as_str()).collect::<Vec<_>>().join(" ");
    assert!(build.contains("+crt-static"), "the binary is linked statically");
    assert!(build.contains("--locked"), "the build uses Cargo.lock as committed");
    let copies: Vec<&String> = last.iter().filter(|(k, _)| k == "COPY").map(|(_, r)| r).collect();
    assert_eq!(copies.len(), 1, "the final stage holds the binary only: {copies:?}");
}

#[test]
fn the_image_user_is_the_charts_non_root_user_and_its_entrypoint_takes_the_charts_args() {
    let all = instructions();
    let last = final_stage(&all);
    let user = last.iter().rev().find(|(k, _)| k == "USER").map(|(_, r)| r.clone()).expect("the final stage sets USER");
    let (uid, gid) = user.split_once(':').expect("USER uid:gid");
    assert!(uid.parse::<u32>().is_ok_and(|u| u != 0), "USER {user}: numeric and not root, for runAsNonRoot");
    assert!(gid.parse::<u32>().is_ok(), "USER {user}: numeric group");
    for template in ["deployment-scheduler.yaml", "deployment-controllers.yaml"] {
        assert_eq!(chart_ids(template), (uid.to_string(), gid.to_string()), "{template} runs as the image's user");
        let text = read(&format!("charts/drover/templates/{template}"));
        assert!(!text.contains("command:"), "{template} overrides the entrypoint");
        assert!(text.contains("readOnlyRootFilesystem: true"));
    }
    let entrypoint = last.iter().rev().find(|(k, _)| k == "ENTRYPOINT").map(|(_, r)| r.clone()).expect("ENTRYPOINT");
    let copied = last.iter().find(|(k, _)| k == "COPY").map(|(_, r)| r.clone()).unwrap_or_default();
    let target = copied.split_whitespace().last().unwrap_or_default();
    assert_eq!(
        entrypoint,
        format!("[\"{target}\"]"),
        "the entrypoint is the copied binary; the chart's args follow it"
    );
}

#[test]
fn the_build_context_leaves_out_build_output_and_history() {
    let ignored: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    for entry in ["target", ".git"] {
        assert!(ignored.iter().any(|i| i == entry), ".dockerignore leaves {entry} in the build context");
    }
}
