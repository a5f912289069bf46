// Reads n and n integers; prints the running sum after each one, one per line.
#include <iostream>
#include <vector>
using namespace std;

int main() {
    int n;
    cin >> n;
    vector<long long> a(n);
    for (int i = 0; i < n; i++) cin >> a[i];
    long long sum = 0;
    for (int i = 0; i < n; i++) {
        sum += a[i];
        cout << sum << endl;
    }
    return 0;
}
