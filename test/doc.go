// Package test holds the tests that cross the provider's families, laid out as terratest
// lays them out: the modules (modules/group, modules/k8s, modules/tf) applied with the
// provider, and every documented example validated as printed. They are acceptance tests
// (TF_ACC=1, see internal/provider/acctest) and read the repository from its root.
package test
