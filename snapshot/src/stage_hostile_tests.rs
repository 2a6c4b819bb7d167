//! Hostile input against staging in process (`stage`): each test names the attack and
//! asserts the tree git alone would give.
