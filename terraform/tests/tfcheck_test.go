package tftests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repo is the repository root, seen from terraform/tests.
const repo = "../.."

// moduleDirs are every Terraform directory of the repository.
func moduleDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, pattern := range []string{"../modules/*", "../examples/*"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, m...)
	}
	if len(dirs) < 2 {
		t.Fatalf("found only %v", dirs)
	}
	return dirs
}

// TestModulesConsistent runs the offline HCL checks on every module and
// example; there must be no problem.
func TestModulesConsistent(t *testing.T) {
	for _, dir := range moduleDirs(t) {
		t.Run(filepath.Base(filepath.Dir(dir))+"/"+filepath.Base(dir), func(t *testing.T) {
			m, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range m.Check() {
				t.Error(p)
			}
		})
	}
}

// brokenFixture copies testdata/broken (stored as *.txt so that the
// real checks of terraform/ never see it) into a temporary module.
func brokenFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, _ := filepath.Glob("testdata/broken/*.txt")
	if len(files) == 0 {
		t.Fatal("no fixture files")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, strings.TrimSuffix(filepath.Base(f), ".txt")), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBrokenModuleFails: a module with one of each mistake must produce
// each of the expected problems, so a green check means something.
func TestBrokenModuleFails(t *testing.T) {
	m, err := Load(brokenFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	probs := strings.Join(m.Check(), "\n")
	t.Logf("problems found in the fixture:\n%s", probs)
	for _, want := range []string{
		`var.instance_typo is not declared`,
		`variable "unused" is declared but never used`,
		`variable "untyped" has no type`,
		`variable "untyped" has no description`,
		`resource aws_s3_bucket.missing is not declared (in output "bucket")`,
		`local.nope is not declared`,
		`provider "random" is used but not in required_providers`,
		`provider "aws" is not pinned`,
		`uses "region", which the call does not pass`,
		`passes "extra", which template boot.sh.tftpl never uses`,
	} {
		if !strings.Contains(probs, want) {
			t.Errorf("the checks missed: %s", want)
		}
	}
}
