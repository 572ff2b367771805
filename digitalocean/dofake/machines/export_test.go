package machines

// RootFSFiles is rootfsFiles, for the test that holds it equal to
// contrib/install-test-tools.sh's ROOTFS_FILES.
var RootFSFiles = rootfsFiles
