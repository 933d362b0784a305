//go:build race

package chaos

// raceBuild: this test binary was built with -race, so prflow is too — the packages are then
// in the build cache already, and the children report data races as well.
const raceBuild = true
