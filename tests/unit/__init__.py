"""Fast tests of pure logic and single modules in-process: no servers, no git, no peers."""
