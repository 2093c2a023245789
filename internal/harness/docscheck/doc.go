// Package docscheck keeps the module's documents true to the code. Its test,
// part of every make test, reads README.md, CONTRIBUTING.md, CHANGELOG.md and
// docs/*.md and checks that
//
//   - every relative link resolves: the file or directory exists, and a
//     #fragment names a heading of the linked Markdown file (GitHub's
//     anchors);
//   - every ```go block is either the text of code in a _test.go file of the
//     module (an example, compiled by go test), or a file that compiles on
//     its own (a block that starts with a package clause).
//   - every table of docs/performance.md that make figures maintains is
//     what its kept result file (docs/figures/NAME.txt) renders;
//   - no page of docs/ drifts into a lab notebook ([Drift]): no commit hash,
//     no figure in prose in a section that holds a maintained table, no
//     table of figures outside figures: markers. [Allowed] names, page by
//     page and with the reason, what reads as drift and is not (a nonce, a
//     setting such as "a 3 s lease"); an entry that matches nothing fails;
//   - docs/operations.md's shardctl list names every command and
//     subcommand of cmd/shardctl.
//
// It needs no network and no database. The package also holds [Figures],
// the tables make figures maintains, and how they are read from Go's
// benchmark output; the command that runs them is docscheck/figures.
package docscheck
