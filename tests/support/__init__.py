"""What the tests share: helpers, fakes, servers and trace makers. Test modules import from
here and take conftest's fixtures; they never import each other."""
