// --recipe NAME (issue 25): named sets of existing options. A recipe's options go before the
// command line's, so any option given explicitly overrides the recipe's value (the parser takes
// an option's last value); the `Recipe:` line at start-up prints the whole set and what the
// command line changed. Where each recipe comes from is cited in README.md ("Recipes").
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace worker {

struct Recipe {
  const char* name;
  const char* what;  // one line for --help and the log
  // (option, value) in the order they are applied; a flag has the value "true".
  std::vector<std::pair<std::string, std::string>> options;
};

const std::vector<Recipe>& recipes();
// The recipe of that name, or nullptr.
const Recipe* find_recipe(const std::string& name);
// "guide, torchvision, nvidia or small-images"
std::string recipe_names();
// The recipe as command-line arguments ("--depth", "18", "--nesterov=true", ...).
std::vector<std::string> recipe_args(const Recipe& r);
// "--depth 18 --stem cifar ..." (flags without their value).
std::string recipe_text(const Recipe& r);

}  // namespace worker
