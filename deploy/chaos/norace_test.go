//go:build !race

package chaos

const raceBuild = false
