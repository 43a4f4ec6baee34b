// A vector whose copies share their elements until one of them is changed (copy on write): the
// programs of identical data-parallel replicas are one in memory, however many replicas there
// are (issue 38). Reads look like std::vector's; a change goes through a writer that copies the
// elements first when another copy still shares them.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace hetsim {

template <class T>
class SharedVector {
 public:
  using value_type = T;
  using const_iterator = typename std::vector<T>::const_iterator;

  SharedVector() = default;
  SharedVector(std::initializer_list<T> init) : v_(std::make_shared<std::vector<T>>(init)) {}

  size_t size() const { return v_ ? v_->size() : 0; }
  bool empty() const { return size() == 0; }
  const T& operator[](size_t i) const { return (*v_)[i]; }
  const T& at(size_t i) const { return get().at(i); }
  const T& front() const { return v_->front(); }
  const T& back() const { return v_->back(); }
  const_iterator begin() const { return get().begin(); }
  const_iterator end() const { return get().end(); }
  const std::vector<T>& get() const {
    static const std::vector<T> none;
    return v_ ? *v_ : none;
  }
  // Whether two copies share their elements (nothing has been written since one was copied).
  bool shares_with(const SharedVector& o) const { return v_ && v_ == o.v_; }
  // The shared elements' identity (null when empty), to find copies.
  const void* id() const { return v_.get(); }

  // The elements to change: this copy's own (copied first when shared).
  std::vector<T>& write() {
    if (!v_) {
      v_ = std::make_shared<std::vector<T>>();
    } else if (v_.use_count() > 1) {
      v_ = std::make_shared<std::vector<T>>(*v_);
    }
    return *v_;
  }
  void push_back(const T& x) { write().push_back(x); }
  void push_back(T&& x) { write().push_back(std::move(x)); }
  template <class... A>
  T& emplace_back(A&&... a) {
    return write().emplace_back(std::forward<A>(a)...);
  }
  void reserve(size_t n) { write().reserve(n); }
  void clear() { v_.reset(); }

 private:
  std::shared_ptr<std::vector<T>> v_;
};

}  // namespace hetsim
