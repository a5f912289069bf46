// Does not compile.
int broken(
