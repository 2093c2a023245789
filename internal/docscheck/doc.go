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
//
// It needs no network and no database.
package docscheck
