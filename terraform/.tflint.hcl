# tflint configuration for terraform/ (run by terraform/tests and
# `make tf-check`). Only the bundled terraform ruleset: it works offline.
plugin "terraform" {
  enabled = true
  preset  = "all"
}
